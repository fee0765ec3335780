"""How messages, dead letters and outcomes are written as Redis stream fields.

A message entry has up to four fields: ``b`` the body, ``f`` its format (``m``: a
`Message`, whose body is its data; ``p``: any other object, pickled), ``k`` the ordering
key (``""``: none) and ``a`` the attributes (``""``: none, else JSON); a `Message` with
neither key nor attributes is ``b`` alone. Its stream id is the message id, and the id's
milliseconds its publish time.

Anyone who can write to the Redis can write such an entry, so a pickled body is loaded
with the broker's restricted unpickler (builtins, the runtime's types and the bus's
``allow=`` classes): a body it refuses is an `UndecodableError`, dead-lettered ``error``.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Mapping
from typing import Any

from runtime.broker._protocol import wire_types
from runtime.broker._wire import TypeRegistry, decode
from runtime.core._message import Message, new_message
from runtime.core._outcome import Nack, Outcome
from runtime.core.settlement._dead_letters import DeadLetter
from runtime.redis._keys import message_id_of

__all__ = ["Codec", "UndecodableError", "nacks_of", "optional", "text_of"]

_PROTOCOL = 5


class UndecodableError(Exception):
    """A stream entry whose body cannot be read back (refused or malformed)."""


def optional(text: str | None) -> str:
    """``text`` as a field that keeps None apart from ``""``."""
    return "" if text is None else "." + text


def text_of(field: bytes | str | None) -> str | None:
    """The inverse of `optional`."""
    if not field:
        return None
    value = field.decode() if isinstance(field, bytes) else field
    return value[1:]


def nacks_of(records: bytes) -> tuple[Nack, ...]:
    """The nacks of a settled record (``destination US reason US error RS`` each)."""
    nacks = []
    for record in records.decode().split("\x1e"):
        if record:
            destination, reason, error = record.split("\x1f")
            nacks.append(Nack(destination, reason, text_of(error)))
    return tuple(nacks)


def outcome_of(records: bytes) -> Outcome:
    """A failed message's outcome from its nack records."""
    return Outcome(acked=False, nacks=nacks_of(records))


def _publish_time(message_id: str) -> float:
    """The publish time in a message id (a stream entry id, with its partition or not)."""
    entry_id = message_id.rpartition("/")[2]
    return int(entry_id[:entry_id.index("-")]) / 1000.0


class Codec:
    """Turns published objects into entry fields and entries back into messages.

    Args:
        allow: the user's plain classes a pickled body may name besides the defaults.

    Raises:
        TypeError: an ``allow`` entry is not a plain class.
    """

    def __init__(self, allow: Iterable[type] = ()) -> None:
        self.allow = tuple(allow)
        self._registry: TypeRegistry = wire_types(self.allow)

    def fields(self, message: Any, key: str | None, attributes: Mapping[str, str] | None,
               ) -> tuple[bytes, str, str, str]:
        """The ``b, f, k, a`` fields of one message."""
        if isinstance(message, Message):
            attrs = message.attributes if attributes is None else attributes
            ordering = key if key is not None else message.ordering_key
            return (message.data, "m", ordering or "", json.dumps(attrs) if attrs else "")
        body = pickle.dumps(message, protocol=_PROTOCOL)
        return (body, "p", key or "", json.dumps(attributes) if attributes else "")

    def message(self, entry_id: str, fields: Mapping[bytes, bytes]) -> tuple[Any, str | None,
                                                                          dict[str, str]]:
        """``(message, key, attributes)`` of a stream entry.

        Raises:
            UndecodableError: the body or a field cannot be read (the text says why).
        """
        if len(fields) == 1 and b"b" in fields:  # a Message with neither key nor attributes
            return new_message(fields[b"b"], {}, None, entry_id, _publish_time(entry_id)), None, {}
        try:
            body = fields[b"b"]
            kind = fields.get(b"f", b"m")
            key = fields[b"k"].decode() or None if b"k" in fields else None
            raw = fields.get(b"a")
            attributes: dict[str, str] = json.loads(raw) if raw else {}
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise UndecodableError(f"entry {entry_id}: malformed fields ({exc!r})") from None
        if kind == b"m":
            message: Any = new_message(body, attributes, key, entry_id, _publish_time(entry_id))
            return message, key, attributes
        if kind != b"p":
            raise UndecodableError(f"entry {entry_id}: unknown body format {kind!r}")
        try:
            return decode(body, self._registry), key, attributes
        except Exception as exc:  # refused or malformed: the decoder's text says which
            raise UndecodableError(f"entry {entry_id}: {exc}") from None

    def dead_letter(self, topic: str, entry_id: str, fields: Mapping[bytes, bytes],
                    partition: int = 0) -> DeadLetter:
        """The `DeadLetter` of an entry of ``partition``'s dead-letter stream (its message
        None when the body cannot be read, or was gone from the stream)."""
        message_id = message_id_of(partition, fields.get(b"m", b"").decode() or entry_id)
        message: Any = None
        key: str | None = None
        attributes: dict[str, str] = {}
        if b"b" in fields:
            try:
                message, key, attributes = self.message(message_id, fields)
            except UndecodableError:
                message = fields[b"b"]
        group = fields.get(b"g", b"").decode() or None
        return DeadLetter(
            message=message, message_id=message_id, topic=topic,
            subscriber_id=int(fields.get(b"s", b"-1")), group=group,
            reason=fields[b"r"].decode(), error=text_of(fields.get(b"e")),
            attempts=int(fields.get(b"n", b"0")), at=_publish_time(entry_id),
            exception=text_of(fields.get(b"x")), traceback=text_of(fields.get(b"t")),
            key=key, attributes=attributes,
        )
