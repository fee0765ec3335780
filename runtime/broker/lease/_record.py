"""What a leased message looks like to Spark: a row with bytes for a payload.

`record_of` turns a delivery into a `LeaseRecord`: `Message.data` as it is, ``bytes``
as they are, ``str`` as UTF-8, anything else JSON-encoded when it can be. A message
that cannot be encoded raises `PayloadError` and is dead-lettered by the caller.

A record is a named tuple, not a dataclass: one is built per leased message on the
broker's hot path (a tuple costs a fraction of a frozen dataclass), and a range of them
transposes into columns with one ``zip``.

`LeaseColumns` holds a range of them as columns; `_ipc.lease_ipc` serves it to Spark.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from runtime.core._block import Block
from runtime.core._envelope import ATTRIBUTES, KEY, PAYLOAD, STAMP_TIME, Envelope, message_id, message_ids
from runtime.core._message import NO_ATTRIBUTES, Message

__all__ = [
    "COLUMNS", "LeaseColumns", "LeaseRecord", "LeasedDelivery", "PayloadError",
    "encode_payload", "envelope_columns", "record_of",
]


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
        PayloadError: the message is not bytes, str, a `Message` or JSON-encodable
            (whatever the JSON encoder raised, a `RecursionError` for deep nesting too).
    """
    if isinstance(message, Message):
        return bytes(message.data)
    if isinstance(message, bytes | bytearray | memoryview):
        return bytes(message)
    if isinstance(message, str):
        return message.encode()
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except Exception as exc:  # TypeError, ValueError, RecursionError (deep nesting), ...:
        # whatever the encoder raises, this message alone cannot be a row.
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
        message_id(envelope),
        envelope[KEY],
        data if type(data) is bytes else bytes(data),
        _text_map(envelope[ATTRIBUTES]),
        published_at,
        attempt,
    )


class LeaseColumns(NamedTuple):
    """Rows as columns, in `COLUMNS` order: what a range of the lease log is served as."""

    message_id: list[str]
    key: list[str | None]
    payload: list[bytes]
    attributes: list[dict[str, str]]
    published_at: list[float]
    attempt: list[int]

    @classmethod
    def of_records(cls, records: Sequence[LeaseRecord]) -> LeaseColumns:
        """The columns of ``records``."""
        return cls(*(list(map(_FIELDS[i], records)) for i in range(len(COLUMNS))))

    def slice(self, first: int, last: int) -> LeaseColumns:
        """Rows ``[first, last)``, as new columns."""
        return LeaseColumns(
            self.message_id[first:last], self.key[first:last], self.payload[first:last],
            self.attributes[first:last], self.published_at[first:last], self.attempt[first:last])

    def append(self, record: LeaseRecord) -> None:
        """Add one row at the end."""
        self.message_id.append(record.message_id)
        self.key.append(record.key)
        self.payload.append(record.payload)
        self.attributes.append(record.attributes)
        self.published_at.append(record.published_at)
        self.attempt.append(record.attempt)

    def records(self) -> list[LeaseRecord]:
        """The rows, as records."""
        return list(map(LeaseRecord, *self))


_KEY, _DATA, _ATTRS, _STAMP = (operator.itemgetter(i) for i in (
    KEY, PAYLOAD, ATTRIBUTES, STAMP_TIME))


# (id, key, payload, attributes, published_at) columns, and (position, error) of the rows
# left out.
EnvelopeColumns = tuple[
    list[str], list["str | None"], list[bytes], list[dict[str, str]], list[float],
    list[tuple[int, str]],
]


def envelope_columns(envelopes: Sequence[Envelope], now: float) -> EnvelopeColumns:
    """The (id, key, payload, attributes, published_at) columns of topic envelopes, and
    the (position, error) of each whose message cannot be encoded (its row is absent).

    Publisher messages (stamped, bytes data) take one C-level pass per column; other
    messages are encoded one by one, as `record_of` does (``now`` stamps the unstamped).
    """
    if type(envelopes) is Block and set(map(type, envelopes.payloads)) <= {bytes}:
        return _block_columns(envelopes)
    stamps = list(map(_STAMP, envelopes))
    datas = list(map(_DATA, envelopes))
    if None not in stamps and set(map(type, datas)) <= {bytes}:
        attributes = list(map(_ATTRS, envelopes))
        if None in attributes:  # none: the shared empty attributes
            attributes = [NO_ATTRIBUTES if a is None else a for a in attributes]
        return (list(map(message_id, envelopes)), list(map(_KEY, envelopes)), datas, attributes,
                stamps, [])
    rows: list[LeaseRecord] = []
    bad: list[tuple[int, str]] = []
    for position, envelope in enumerate(envelopes):
        try:
            rows.append(_envelope_record(envelope, now))
        except PayloadError as exc:
            bad.append((position, str(exc)))
    columns = LeaseColumns.of_records(rows)
    return (columns.message_id, columns.key, columns.payload, columns.attributes,
            columns.published_at, bad)


def _block_columns(block: Block) -> EnvelopeColumns:
    """`envelope_columns` of a block of bytes payloads, column by column."""
    size, seqs, stamps, attributes = len(block), block.seqs, block.stamps, block.attributes
    ids = (message_ids(seqs.start, size) if type(seqs) is range and seqs.start > 0
           else list(map(str, seqs)))
    return (
        ids, [None] * size if block.keys is None else list(block.keys), list(block.payloads),
        [NO_ATTRIBUTES] * size if attributes is None else
        [NO_ATTRIBUTES if a is None else a for a in attributes],
        [stamps] * size if isinstance(stamps, float) else list(stamps), [],
    )


def _envelope_record(envelope: Envelope, now: float) -> LeaseRecord:
    """The row of one envelope (attempt 0: the caller has the attempts).

    Raises:
        PayloadError: its message cannot be encoded.
    """
    stamp = envelope[STAMP_TIME]
    if stamp is not None:
        return _stamped_record(envelope, stamp, 0)
    message = envelope[PAYLOAD]
    if type(message) is Message:
        data = message.data
        return LeaseRecord(
            message_id(envelope), envelope[KEY] or message.ordering_key or None,
            data if type(data) is bytes else bytes(data),
            _text_map(envelope[ATTRIBUTES] or message.attributes),
            message.publish_time or now, 0)
    return LeaseRecord(message_id(envelope), envelope[KEY] or None, encode_payload(message),
                       _text_map(envelope[ATTRIBUTES]), now, 0)


def _text_map(attributes: Any) -> dict[str, str]:
    if not attributes:
        return {}
    return {str(k): str(v) for k, v in attributes.items()}


COLUMNS = LeaseRecord._fields
_FIELDS = [operator.itemgetter(i) for i in range(len(COLUMNS))]
