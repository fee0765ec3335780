"""What a leased message looks like to Spark: a row with bytes for a payload.

`record_of` turns a delivery into a `LeaseRecord`: `Message.data` as it is, ``bytes``
as they are, ``str`` as UTF-8, anything else JSON-encoded when it can be. A message
that cannot be encoded raises `PayloadError` and is dead-lettered by the caller.

A record is a named tuple, not a dataclass: one is built per leased message on the
broker's hot path (a tuple costs a fraction of a frozen dataclass), and a range of them
transposes into columns with one ``zip``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from runtime.core._envelope import ATTRIBUTES, KEY, MESSAGE_ID, PAYLOAD, STAMP_TIME, Envelope
from runtime.core._message import Message

__all__ = ["COLUMNS", "LeaseRecord", "LeasedDelivery", "PayloadError", "encode_payload", "record_of"]


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


class LeaseRecord(NamedTuple):
    """One row of the source: the columns Spark reads, in `COLUMNS` order."""

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
    envelope = getattr(delivery, "_envelope", None)
    if envelope is not None and envelope[STAMP_TIME] is not None:
        return _stamped_record(envelope, envelope[STAMP_TIME], delivery.attempt)
    message = delivery.message
    if type(message) is Message:  # the broker's and the sink's messages: no encoding
        data = message.data
        return LeaseRecord(
            delivery.message_id,
            delivery.key or message.ordering_key or None,
            data if type(data) is bytes else bytes(data),
            _text_map(delivery.attributes or message.attributes),
            message.publish_time or clock(),
            delivery.attempt,
        )
    return LeaseRecord(
        delivery.message_id, delivery.key or None, encode_payload(message),
        _text_map(delivery.attributes), clock(), delivery.attempt,
    )


def _stamped_record(envelope: Envelope, published_at: float, attempt: int) -> LeaseRecord:
    """The row of a topic delivery of a Publisher `Message`, read off its envelope.

    ``Delivery.message`` would build the stamped `Message` only for its data to be read
    here; the envelope holds its data, key, attributes, id and publish time.
    """
    data = envelope[PAYLOAD]
    return LeaseRecord(
        envelope[MESSAGE_ID],
        envelope[KEY],
        data if type(data) is bytes else bytes(data),
        _text_map(envelope[ATTRIBUTES]),
        published_at,
        attempt,
    )


def _text_map(attributes: Any) -> dict[str, str]:
    if not attributes:
        return {}
    return {str(k): str(v) for k, v in attributes.items()}


COLUMNS = LeaseRecord._fields
