"""The topic's record of one accepted message, shared by all of its deliveries.

An envelope is a plain tuple (one is built per published message on the hot path, and a
tuple costs a fifth of a slots object); read it with the index constants below.
``stamp_time`` is None for a plain ``publish(obj)``; for a Publisher `Message` it is the
publish time, and the payload is the message as published, stamped with its id and
time only when someone reads it (`message_of`).
"""

from __future__ import annotations

from typing import Any, Final

from runtime._message import Message, new_message

__all__ = [
    "ATTRIBUTES", "KEY", "MESSAGE_ID", "PAYLOAD", "SEQ", "STAMP_TIME", "TOPIC", "Envelope",
    "message_of", "stamp",
]

# (seq, message_id, payload, key, attributes, topic, stamp_time)
Envelope = tuple[int, str, Any, "str | None", "dict[str, str]", str, "float | None"]
SEQ: Final = 0
MESSAGE_ID: Final = 1
PAYLOAD: Final = 2
KEY: Final = 3
ATTRIBUTES: Final = 4
TOPIC: Final = 5
STAMP_TIME: Final = 6

def stamp(message: Message, message_id: str, publish_time: float) -> Message:
    """A copy of ``message`` with its id and publish time set."""
    return new_message(message.data, message.attributes, message.ordering_key,
                       message_id, publish_time)


def message_of(envelope: Envelope) -> Any:
    """The message subscribers see: the object itself, or the stamped `Message`."""
    stamp_time = envelope[STAMP_TIME]
    if stamp_time is None:
        return envelope[PAYLOAD]
    return stamp(envelope[PAYLOAD], envelope[MESSAGE_ID], stamp_time)
