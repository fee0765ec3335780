"""What a leased message looks like to Spark: a row with bytes for a payload.

`record_of` turns a delivery into a `LeaseRecord`: `Message.data` as it is, ``bytes``
as they are, ``str`` as UTF-8, anything else JSON-encoded when it can be. A message
that cannot be encoded raises `PayloadError` and is dead-lettered by the caller.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from runtime._message import Message

__all__ = ["LeaseRecord", "LeasedDelivery", "PayloadError", "encode_payload", "record_of"]


class LeasedDelivery(Protocol):
    """The part of a `Delivery` the lease log uses."""

    @property
    def message(self) -> Any: ...

    @property
    def message_id(self) -> str: ...

    @property
    def key(self) -> str | None: ...

    @property
    def attributes(self) -> Any: ...

    @property
    def attempt(self) -> int: ...

    def ack(self) -> None: ...

    def nack(self, reason: str = "nack") -> None: ...


class PayloadError(ValueError):
    """The message cannot be encoded as a payload (neither bytes, str nor JSON)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRecord:
    """One row of the source: the columns Spark reads."""

    message_id: str
    key: str | None
    payload: bytes
    attributes: dict[str, str]
    published_at: float
    attempt: int


def encode_payload(message: object) -> bytes:
    """The payload bytes of ``message``.

    Raises:
        PayloadError: the message is not bytes, str, a `Message` or JSON-encodable.
    """
    if isinstance(message, Message):
        return bytes(message.data)
    if isinstance(message, bytes | bytearray | memoryview):
        return bytes(message)
    if isinstance(message, str):
        return message.encode()
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"cannot encode a {type(message).__qualname__} message as a payload: {exc}"
        ) from exc


def record_of(delivery: LeasedDelivery, clock: Callable[[], float] = time.time) -> LeaseRecord:
    """The row of ``delivery`` (``published_at`` is the publish time, else now).

    Raises:
        PayloadError: the message cannot be encoded.
    """
    message = delivery.message
    published, key, attributes = 0.0, delivery.key, delivery.attributes
    if isinstance(message, Message):
        published = message.publish_time
        key = key or message.ordering_key
        attributes = attributes or message.attributes
    return LeaseRecord(
        message_id=delivery.message_id,
        key=key or None,
        payload=encode_payload(message),
        attributes={str(k): str(v) for k, v in (attributes or {}).items()},
        published_at=published or clock(),
        attempt=delivery.attempt,
    )
