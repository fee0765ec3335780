"""The broker's request/reply protocol: frames, the wire types, what may cross.

A request is ``(operation, args)``; a reply is ``("ok", value)`` or ``("error",
exception)``. One request is in flight per connection. Values are builtins, the
`datetime` types, `Decimal`, `UUID`, the runtime's own message types (`Message`,
`TopicStats`, `DeadLetter`, ...), the runtime's errors, builtin exceptions,
`DeliveryFrame` and the plain classes a user allowed (``allow=``). A request the
server cannot decode is answered with `NotTransferableError`, and so is a reply
that would not cross.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import runtime.errors as errors
from runtime.broker._wire import DEFAULT_VALUE_TYPES, NotTransferableError, TypeRegistry
from runtime.core._message import Message
from runtime.core._outcome import Nack, Outcome
from runtime.core._settings import TopicSettings
from runtime.core._stats import TopicStats
from runtime.core.settlement._dead_letters import DeadLetter

__all__ = [
    "DeliveryFrame",
    "plain_letter",
    "plain_message",
    "transferable",
    "untransferable",
    "wire_error",
    "wire_types",
]

# Public runtime types that may cross; looked up by name so this module does not
# depend on the modules that define them.
_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray)
_MAX_DEPTH = 32
_BUILTIN_CONTAINERS = (list, tuple, set, frozenset)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryFrame:
    """A delivery as it crosses the wire; ``token`` names it for ack/nack."""

    token: int
    message: Any
    message_id: str
    topic: str
    subscriber_id: int
    group: str | None
    key: str | None
    attributes: dict[str, str]
    attempt: int


def wire_types(allow: Iterable[type] = ()) -> TypeRegistry:
    """The allow-list of the broker's frames, plus the user's ``allow`` classes.

    Raises:
        TypeError: an ``allow`` entry is not a dataclass, named tuple or enum.
    """
    types: list[type] = [Message, DeliveryFrame, DeadLetter, Nack, Outcome, TopicSettings,
                         TopicStats, NotTransferableError]
    types += [t for t in vars(errors).values()
              if isinstance(t, type) and issubclass(t, errors.BusError)]
    return TypeRegistry(types, allow)


def plain_message(message: Any) -> Any:
    """``message`` as it crosses: a `Message` whose attributes are not a plain `dict`
    (a subclass, such as the shared read-only empty attributes of a message published
    without any) becomes a copy with a plain one; anything else is itself.

    The allow-list reads no dict subclass, and the attributes are a mapping of `str` to
    `str` whatever their class, so they cross as a `dict` rather than refuse the message.
    """
    if type(message) is Message and type(message.attributes) is not dict:
        return dataclasses.replace(message, attributes=dict(message.attributes))
    return message


def plain_letter(letter: DeadLetter) -> DeadLetter:
    """``letter`` as it crosses: its message and attributes as `plain_message` says."""
    message = plain_message(letter.message)
    if message is letter.message and type(letter.attributes) is dict:
        return letter
    return dataclasses.replace(letter, message=message, attributes=dict(letter.attributes))


def untransferable(
    value: object, registry: TypeRegistry, depth: int = 0, seen: set[int] | None = None
) -> str | None:
    """The first type in ``value`` the other side would refuse, or None when all cross.

    Each object is checked once (``seen``): a frame's shared references can make a
    32-deep structure with 2**32 paths, but never more objects than its own bytes.
    """
    kind = type(value)
    if kind in _SCALARS:
        return None
    seen = set() if seen is None else seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    if depth > _MAX_DEPTH:
        return f"{kind.__qualname__} nested deeper than {_MAX_DEPTH}"
    if isinstance(value, dict):
        items: Iterable[object] = [*value.keys(), *value.values()] if kind is dict else ()
    elif kind in _BUILTIN_CONTAINERS:
        items = value  # type: ignore[assignment]
    elif isinstance(value, BaseException):
        return _untransferable_error(value, registry, depth, seen)
    elif kind in registry or kind in DEFAULT_VALUE_TYPES:
        items = _parts(value)
    else:
        return f"{kind.__module__}.{kind.__qualname__}"
    if kind is not dict and isinstance(value, dict):
        return f"{kind.__module__}.{kind.__qualname__}"
    for item in items:
        found = untransferable(item, registry, depth + 1, seen)
        if found is not None:
            return found
    return None


def _parts(value: object) -> Iterable[object]:
    """What an allowed object carries: fields, tuple items, a tzinfo (enums: nothing)."""
    if isinstance(value, enum.Enum):
        return ()
    if isinstance(value, tuple):
        return tuple(value)
    if dataclasses.is_dataclass(value):
        return [getattr(value, field.name) for field in dataclasses.fields(value)]
    if isinstance(value, datetime.datetime | datetime.time) and value.tzinfo is not None:
        return [value.tzinfo] if type(value.tzinfo) is not datetime.timezone else ()
    return ()


def _untransferable_error(
    exc: BaseException, registry: TypeRegistry, depth: int = 0, seen: set[int] | None = None
) -> str | None:
    kind = type(exc)
    allowed = (kind.__module__ == "builtins" and issubclass(kind, Exception)) or kind in registry
    if not allowed or getattr(exc, "__dict__", None):
        return f"{kind.__module__}.{kind.__qualname__}"
    return untransferable(exc.args, registry, depth + 1, seen)


def transferable(value: object, registry: TypeRegistry) -> bool:
    """Whether ``value`` decodes on the other side (builtins and allowed types only)."""
    return untransferable(value, registry) is None


def wire_error(exc: BaseException, registry: TypeRegistry) -> BaseException:
    """``exc`` itself when it can cross, else a `RuntimeError` carrying its text."""
    if _untransferable_error(exc, registry, 0) is None:
        return exc
    return RuntimeError(f"{type(exc).__qualname__}: {exc}")
