"""Rows a sink stages: columns of payloads, keys, attributes and error texts.

A write task sends one `columns` dict per part: ``payload`` (bytes or str, required),
and optionally ``key``, ``attributes`` and ``error`` lists of the same length. A row
with an error text goes to the topic's dead letters (reason ``error``) instead of
being published.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime._message import Message

__all__ = ["StagedRows"]

_COLUMNS = ("payload", "key", "attributes", "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedRows:
    """One staged part: validated columns of equal length."""

    payloads: Sequence[bytes]
    keys: Sequence[str | None] | None = None
    attributes: Sequence[Mapping[str, str] | None] | None = None
    errors: Sequence[str | None] | None = None

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> StagedRows:
        """Validate a wire ``columns`` dict.

        Raises:
            ValueError: unknown or missing columns, lengths differ, a payload that is
                neither bytes nor str.
        """
        unknown = set(columns) - set(_COLUMNS)
        if unknown or "payload" not in columns:
            raise ValueError(f"staged columns must be {_COLUMNS} with a payload, got {sorted(columns)}")
        payloads = [_as_bytes(p) for p in columns["payload"]]
        optional = {name: columns.get(name) for name in _COLUMNS[1:]}
        for name, values in optional.items():
            if values is not None and len(values) != len(payloads):
                raise ValueError(f"column {name!r} has {len(values)} rows, payload {len(payloads)}")
        return cls(payloads=payloads, keys=optional["key"], attributes=optional["attributes"],
                   errors=optional["error"])

    def __len__(self) -> int:
        return len(self.payloads)

    def messages(self) -> Iterator[tuple[Message, str | None]]:
        """Each row as a `Message` with its error text (None: publish it)."""
        for index, payload in enumerate(self.payloads):
            key = self.keys[index] if self.keys is not None else None
            attributes = self.attributes[index] if self.attributes is not None else None
            error = self.errors[index] if self.errors is not None else None
            message = Message(
                data=payload,
                attributes={str(k): str(v) for k, v in (attributes or {}).items()},
                ordering_key=key or None,
            )
            yield message, (str(error) if error is not None else None)


def _as_bytes(payload: object) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise ValueError(f"payload must be bytes or str, got {type(payload).__qualname__}")
