"""Rows a sink stages: columns of payloads, keys, attributes and error texts.

A write task sends one `columns` dict per part: ``payload`` (bytes or str, required),
and optionally ``key``, ``attributes`` and ``error`` lists of the same length. A row
with an error text goes to the topic's dead letters (reason ``error``) instead of
being published.

A Spark write task sends the same columns as one Arrow IPC stream instead (`from_ipc`):
one ``bytes`` value on the wire, turned into lists in C loops; a binary ``key`` there
becomes the runtime's ``str`` key by UTF-8 with ``surrogateescape``, which is lossless
(``key.encode("utf-8", "surrogateescape")`` gives the bytes back) and keeps a UTF-8 key
equal to its text.

The rows become `Message` objects when they are staged, not when they are committed:
staging runs while Spark's tasks still run, the commit is on the query's critical
path and then only hands the prepared messages to the topic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.core._message import Message, new_message

__all__ = ["StagedRows"]

_COLUMNS = ("payload", "key", "attributes", "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedRows:
    """One staged part: the messages to publish and the rows to dead-letter.

    ``rejected`` pairs a row's message with its error text, in row order.
    """

    messages: list[Message]
    rejected: list[tuple[Message, str]]

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> StagedRows:
        """Validate a wire ``columns`` dict and build its messages.

        Raises:
            ValueError: unknown or missing columns, lengths differ, a payload that is
                neither bytes nor str.
        """
        unknown = set(columns) - set(_COLUMNS)
        if unknown or "payload" not in columns:
            raise ValueError(f"staged columns must be {_COLUMNS} with a payload, got {sorted(columns)}")
        payloads = _payloads(columns["payload"])
        keys, attributes, errors = (_column(columns, name, len(payloads)) for name in _COLUMNS[1:])
        messages = _messages(payloads, keys, attributes)
        if not errors:
            return cls(messages=messages, rejected=[])
        failed = {i for i, error in enumerate(errors) if error is not None}
        return cls(
            messages=[m for i, m in enumerate(messages) if i not in failed],
            rejected=[(messages[i], str(errors[i])) for i in sorted(failed)],
        )

    @classmethod
    def from_ipc(cls, data: bytes) -> StagedRows:
        """`from_columns` of the columns of an Arrow IPC stream (see the module).

        Raises:
            ValueError: not an Arrow IPC stream, or its columns are refused as in
                `from_columns`.
        """
        import pyarrow as pa

        try:
            table = pa.ipc.open_stream(data).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(f"staged rows are not an Arrow IPC stream: {exc}") from exc
        columns: dict[str, Any] = {name: table.column(name).to_pylist() for name in table.column_names}
        if "key" in columns:
            columns["key"] = [k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else k
                              for k in columns["key"]]
        if "attributes" in columns:  # an Arrow map reads as a list of pairs
            columns["attributes"] = [None if pairs is None else dict(pairs)
                                     for pairs in columns["attributes"]]
        return cls.from_columns(columns)

    def __len__(self) -> int:
        return len(self.messages) + len(self.rejected)


def _messages(
    payloads: list[bytes], keys: Sequence[str | None], attributes: Sequence[Any]
) -> list[Message]:
    if not keys and not attributes:
        return [new_message(payload, {}, None) for payload in payloads]
    rows = len(payloads)
    return [
        new_message(payload, _text_map(pairs), key or None)
        for payload, key, pairs in zip(payloads, keys or [None] * rows,
                                       attributes or [None] * rows, strict=True)
    ]


def _payloads(values: Sequence[object]) -> list[bytes]:
    if all(type(value) is bytes for value in values):
        return list(values)  # type: ignore[arg-type]  # checked just above
    return [_as_bytes(value) for value in values]


def _column(columns: Mapping[str, Any], name: str, rows: int) -> Sequence[Any]:
    """Column ``name``, or an empty tuple when absent or entirely null."""
    values = columns.get(name)
    if values is None:
        return ()
    if len(values) != rows:
        raise ValueError(f"column {name!r} has {len(values)} rows, payload {rows}")
    return values if any(value is not None for value in values) else ()


def _text_map(attributes: Mapping[Any, Any] | None) -> dict[str, str]:
    if not attributes:
        return {}
    return {str(k): str(v) for k, v in attributes.items()}


def _as_bytes(payload: object) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise ValueError(f"payload must be bytes or str, got {type(payload).__qualname__}")
