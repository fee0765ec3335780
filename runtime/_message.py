"""The wire-level message that Publishers, the broker and the Spark sink carry."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Message"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A published message: bytes plus string attributes (Pub/Sub style).

    ``message_id`` and ``publish_time`` are assigned by the topic when it accepts
    the message; before that they are ``""`` and ``0.0``.
    """

    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    ordering_key: str | None = None
    message_id: str = ""
    publish_time: float = 0.0

    @property
    def size(self) -> int:
        """Bytes counted by batching and flow control: data plus UTF-8 attributes."""
        return len(self.data) + sum(
            len(k.encode()) + len(v.encode()) for k, v in self.attributes.items()
        )
