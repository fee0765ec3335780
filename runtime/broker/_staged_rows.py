"""Rows a sink stages: columns of payloads, keys, attributes and error texts.

A write task sends one `columns` dict per part: ``payload`` (bytes or str, required),
and optionally ``key``, ``attributes`` and ``error`` lists of the same length. A row
with an error text goes to the topic's dead letters (reason ``error``) instead of
being published.

A Spark write task sends the same columns as one Arrow IPC stream instead (`from_ipc`):
one ``bytes`` value on the wire, turned into lists in C loops; a binary ``key`` there
becomes the runtime's ``str`` key by UTF-8 with ``surrogateescape``, which is lossless
(``key.encode("utf-8", "surrogateescape")`` gives the bytes back) and keeps a UTF-8 key
equal to its text. The stream comes from a peer: it is validated in full before any
value is read (`_arrow_frame.read_batches`), and its decoded size is bounded.

The rows are validated, converted and accepted by their topic (`Stamped`: ids and
publish time) when they are staged, not when they are committed: staging runs while
Spark's tasks still run, the commit is on the query's critical path and then only fans
the prepared envelopes out. No `Message` is built per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from runtime.broker._arrow_frame import ROW_COST, decoded_size, read_batches
from runtime.broker._wire import NotTransferableError
from runtime.core._message import Message, new_message

__all__ = ["StagedRows", "Stamped"]

_COLUMNS = ("payload", "key", "attributes", "error")


class Stamped(NamedTuple):
    """A staged part as its topic accepted it (``Topic._stamp_parts``: ids and publish
    time given when staged), and the rows to dead-letter, each with its error text."""

    envelopes: Sequence[Any]
    rejected: list[tuple[Message, str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedRows:
    """One staged part: the rows to publish as parallel lists (what a topic publishes a
    batch from, see ``Topic._publish_parts``), and the rows to dead-letter.

    ``rejected`` pairs a row's message with its error text, in row order.
    """

    datas: list[bytes]
    attributes: list[dict[str, str] | None]  # None: none (no dict per row)
    keys: list[str | None]
    rejected: list[tuple[Message, str]]
    size: int  # about how many bytes the rows hold (what staging limits count)

    @property
    def messages(self) -> list[Message]:
        """The rows to publish as `Message` objects (built on each call)."""
        return [new_message(data, attributes or {}, key)
                for data, attributes, key in zip(self.datas, self.attributes, self.keys, strict=True)]

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], *, size: int | None = None) -> StagedRows:
        """Validate a wire ``columns`` dict and build its rows; ``size`` is what they hold
        (default: their payload bytes and `ROW_COST` per row).

        Raises:
            ValueError: unknown or missing columns, lengths differ, a payload that is
                neither bytes nor str.
        """
        unknown = set(columns) - set(_COLUMNS)
        if unknown or "payload" not in columns:
            raise ValueError(f"staged columns must be {_COLUMNS} with a payload, got {sorted(columns)}")
        datas = _payloads(columns["payload"])
        rows = len(datas)
        keys, attributes, errors = (_column(columns, name, rows) for name in _COLUMNS[1:])
        # An empty key is no key; a row with attributes gets a dict of its own.
        key_list: list[str | None] = [key or None for key in keys] if keys else [None] * rows
        maps: list[dict[str, str] | None] = (
            [_text_map(pairs) for pairs in attributes] if attributes else [None] * rows)
        if size is None:
            size = sum(map(len, datas)) + ROW_COST * rows
        if not errors:
            return cls(datas=datas, attributes=maps, keys=key_list, rejected=[], size=size)
        failed = [i for i, error in enumerate(errors) if error is not None]
        ok = sorted(set(range(rows)) - set(failed))
        return cls(
            datas=[datas[i] for i in ok], attributes=[maps[i] for i in ok],
            keys=[key_list[i] for i in ok],
            rejected=[(new_message(datas[i], maps[i] or {}, key_list[i]), str(errors[i]))
                      for i in failed],
            size=size,
        )

    @classmethod
    def from_ipc(cls, data: bytes, max_bytes: int | None = None) -> StagedRows:
        """`from_columns` of the columns of an Arrow IPC stream (see the module); its
        ``size`` is `decoded_size`.

        Nothing of ``data`` is read as a value before it is validated in full
        (`read_batches`: schema, no dictionary or compression, offsets and lengths).

        Raises:
            NotTransferableError: not a valid Arrow IPC stream of the staged columns
                (``payload`` binary or string; ``key`` string or binary; ``attributes``
                map<string,string>; ``error`` string), or rows that decode to more than
                ``max_bytes``; the text names the column, the check or the size.
            ValueError: its columns are refused as in `from_columns`.
        """
        import pyarrow as pa

        try:
            schema, batches = read_batches(data, _check_schema)
        except ValueError as exc:
            raise NotTransferableError("stage", f"its staged rows: {exc}") from None
        size = sum(decoded_size(batch, ("attributes",)) for batch in batches)
        if max_bytes is not None and size > max_bytes:
            raise NotTransferableError(
                "stage", f"its staged rows decode to about {size:,} bytes, over the limit "
                f"of {max_bytes:,} bytes per part (stage fewer rows per call)")
        table = pa.Table.from_batches(batches, schema)
        rows = table.num_rows
        # A column that is all null (a sink without keys or attributes: the usual case)
        # is absent: no list of Nones to build and then scan in Python per row.
        columns: dict[str, Any] = {
            name: table.column(name).to_pylist() for name in table.column_names
            if name == "payload" or table.column(name).null_count < rows
        }
        if "key" in columns:
            columns["key"] = [k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else k
                              for k in columns["key"]]
        if "attributes" in columns:  # an Arrow map reads as a list of pairs
            columns["attributes"] = [None if pairs is None else dict(pairs)
                                     for pairs in columns["attributes"]]
        return cls.from_columns(columns, size=size)

    def __len__(self) -> int:
        return len(self.datas) + len(self.rejected)


def _check_schema(schema: Any) -> None:
    """Refuse a stream whose columns are not the staged ones, of their types.

    Raises:
        ValueError: a column unknown, repeated or of another type, or no ``payload``.
    """
    import pyarrow as pa

    text, binary = (pa.types.is_string, pa.types.is_large_string), (
        pa.types.is_binary, pa.types.is_large_binary)
    kinds = {"payload": (*binary, *text), "key": (*text, *binary, pa.types.is_null),
             "error": (*text, pa.types.is_null), "attributes": (_is_text_map, pa.types.is_null)}
    names = list(schema.names)
    if len(set(names)) != len(names) or "payload" not in names:
        raise ValueError(f"columns must be {sorted(kinds)} with a payload, each once; got {names}")
    for field in schema:
        accepted = kinds.get(field.name)
        if accepted is None:
            raise ValueError(f"unknown column {field.name!r} (columns: {sorted(kinds)})")
        if not any(accepts(field.type) for accepts in accepted):
            raise ValueError(f"column {field.name!r} has type {field.type}, which is refused")


def _is_text_map(kind: Any) -> bool:
    import pyarrow as pa

    def is_text(value: Any) -> bool:
        return bool(pa.types.is_string(value) or pa.types.is_large_string(value))

    return bool(pa.types.is_map(kind) and is_text(kind.key_type) and is_text(kind.item_type))


def _payloads(values: Sequence[object]) -> list[bytes]:
    if set(map(type, values)) <= {bytes}:  # one C-level pass
        return list(values)  # type: ignore[arg-type]  # checked just above
    return [_as_bytes(value) for value in values]


def _column(columns: Mapping[str, Any], name: str, rows: int) -> Sequence[Any]:
    """Column ``name``, or an empty tuple when absent or entirely null."""
    values = columns.get(name)
    if values is None:
        return ()
    if len(values) != rows:
        raise ValueError(f"column {name!r} has {len(values)} rows, payload {rows}")
    return values if values.count(None) < rows else ()  # count: one C-level pass


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
