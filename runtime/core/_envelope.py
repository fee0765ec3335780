"""The topic's record of one accepted message, shared by all of its deliveries.

An envelope is a plain tuple (one is built per published message on the hot path, and a
tuple costs a fifth of a slots object); read it with the index constants below.
``stamp_time`` is None for a plain ``publish(obj)``: the payload is the object itself.
``attributes`` may be None for none (read them through `Delivery.attributes`).
For a Publisher `Message` it is the publish time, the payload is the message's data and
the key and attributes are its own; the `Message` subscribers see is built only when
someone reads it (`message_of`), so an unread message costs no object of its own.
"""

from __future__ import annotations

from typing import Any, Final

from runtime.core._message import NO_ATTRIBUTES, new_message

__all__ = [
    "ATTRIBUTES", "KEY", "MESSAGE_ID", "PAYLOAD", "SEQ", "STAMP_TIME", "TOPIC", "Envelope",
    "message_ids", "message_of",
]

# (seq, message_id, payload, key, attributes, topic, stamp_time); the id is always
# ``str(seq)`` (a worker rebuilds ids from the numbers: `WorkBatch`).
Envelope = tuple[int, str, Any, "str | None", "dict[str, str] | None", str, "float | None"]
SEQ: Final = 0
MESSAGE_ID: Final = 1
PAYLOAD: Final = 2
KEY: Final = 3
ATTRIBUTES: Final = 4
TOPIC: Final = 5
STAMP_TIME: Final = 6

# A message's id is its sequence number in decimal. Ids of consecutive numbers are built
# as a prefix and a suffix from this table: half the time of str() per number (100 ids:
# 4.3 against 8.4 µs), one of the costs per message of every Publisher batch.
_SUFFIXES = tuple(f"{n:03d}" for n in range(1000))


def message_of(envelope: Envelope) -> Any:
    """The message subscribers see: the object itself, or the stamped `Message`."""
    stamp_time = envelope[STAMP_TIME]
    if stamp_time is None:
        return envelope[PAYLOAD]
    attributes = envelope[ATTRIBUTES]
    return new_message(envelope[PAYLOAD], NO_ATTRIBUTES if attributes is None else attributes,
                       envelope[KEY], envelope[MESSAGE_ID], stamp_time)


def message_ids(first: int, count: int) -> list[str]:
    """The ids of sequence numbers ``first`` to ``first + count - 1`` (``first >= 0``):
    ``[str(n) for n in range(first, first + count)]``, faster."""
    ids: list[str] = []
    number, end = first, first + count
    while number < end:
        high, low = divmod(number, 1000)
        stop = min(end, number + 1000 - low)
        if high:
            prefix = str(high)
            ids += [prefix + suffix for suffix in _SUFFIXES[low:low + stop - number]]
        else:
            ids += map(str, range(number, stop))
        number = stop
    return ids
