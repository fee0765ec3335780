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
    "message_of",
]

# (seq, message_id, payload, key, attributes, topic, stamp_time)
Envelope = tuple[int, str, Any, "str | None", "dict[str, str] | None", str, "float | None"]
SEQ: Final = 0
MESSAGE_ID: Final = 1
PAYLOAD: Final = 2
KEY: Final = 3
ATTRIBUTES: Final = 4
TOPIC: Final = 5
STAMP_TIME: Final = 6


def message_of(envelope: Envelope) -> Any:
    """The message subscribers see: the object itself, or the stamped `Message`."""
    stamp_time = envelope[STAMP_TIME]
    if stamp_time is None:
        return envelope[PAYLOAD]
    attributes = envelope[ATTRIBUTES]
    return new_message(envelope[PAYLOAD], NO_ATTRIBUTES if attributes is None else attributes,
                       envelope[KEY], envelope[MESSAGE_ID], stamp_time)
