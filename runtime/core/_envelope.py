"""The topic's record of one accepted message, shared by all of its deliveries.

An envelope is a plain tuple (cheaper to build than an object with slots); read it with the
index constants below. Publisher messages accepted together are kept as one `Block` of
columns, which builds an envelope only where one is read.
``stamp_time`` is None for a plain ``publish(obj)``: the payload is the object itself.
``attributes`` may be None for none (read them through `Delivery.attributes`).
For a Publisher `Message` it is the publish time, the payload is the message's data and
the key and attributes are its own; the `Message` subscribers see is built only when
someone reads it (`message_of`), so an unread message costs no object of its own.

A message's id is its sequence number in decimal, and its envelope holds None for it:
read it with `message_id`. Only a replayed dead letter, which keeps its message's id
under a new (negative) number, holds the id itself: no id string lives per message
while it is in flight (`message_ids` spells a batch's ids when it is published).
"""

from __future__ import annotations

from typing import Any, Final

from runtime.core._message import NO_ATTRIBUTES, new_message

__all__ = [
    "ATTRIBUTES", "KEY", "MESSAGE_ID", "PAYLOAD", "SEQ", "STAMP_TIME", "TOPIC", "Envelope",
    "message_id", "message_ids", "message_of",
]

# (seq, message_id, payload, key, attributes, topic, stamp_time); message_id is None
# when the id is ``str(seq)`` (see `message_id`).
Envelope = tuple[int, "str | None", Any, "str | None", "dict[str, str] | None", str, "float | None"]
SEQ: Final = 0
MESSAGE_ID: Final = 1
PAYLOAD: Final = 2
KEY: Final = 3
ATTRIBUTES: Final = 4
TOPIC: Final = 5
STAMP_TIME: Final = 6

# A message's id is its sequence number in decimal. Ids of consecutive numbers are built
# as a prefix and a suffix from this table instead of one str() per number (a cost per
# message of every Publisher batch whose ids are read; `message_ids` is checked against
# str() in tests/runtime/core/test_message_ids.py).
_SUFFIXES = tuple(f"{n:03d}" for n in range(1000))


def message_id(envelope: Envelope) -> str:
    """The id of ``envelope``'s message."""
    given = envelope[MESSAGE_ID]
    return str(envelope[SEQ]) if given is None else given


def message_of(envelope: Envelope) -> Any:
    """The message subscribers see: the object itself, or the stamped `Message`."""
    stamp_time = envelope[STAMP_TIME]
    if stamp_time is None:
        return envelope[PAYLOAD]
    attributes = envelope[ATTRIBUTES]
    return new_message(envelope[PAYLOAD], NO_ATTRIBUTES if attributes is None else attributes,
                       envelope[KEY], message_id(envelope), stamp_time)


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
