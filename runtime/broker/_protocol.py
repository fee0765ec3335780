"""The broker's request/reply protocol: frames, the wire types, what may cross.

A request is ``(operation, args)``; a reply is ``("ok", value)`` or ``("error",
exception)``. One request is in flight per connection. Values are builtins, the
runtime's own message types (`Message`, `TopicStats`, `DeadLetter`, ...), the
runtime's errors, builtin exceptions and `DeliveryFrame`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import runtime.errors as errors
from runtime.broker._wire import TypeRegistry
from runtime.core._message import Message
from runtime.core._outcome import Nack, Outcome
from runtime.core._settings import TopicSettings
from runtime.core._stats import TopicStats
from runtime.core.settlement._dead_letters import DeadLetter

__all__ = [
    "DeliveryFrame",
    "transferable",
    "wire_error",
    "wire_types",
]

# Public runtime types that may cross; looked up by name so this module does not
# depend on the modules that define them.
_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray)
_MAX_DEPTH = 32


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


def wire_types() -> TypeRegistry:
    """The allow-list of the broker's frames (built once per server or client)."""
    types: list[type] = [Message, DeliveryFrame, DeadLetter, Nack, Outcome, TopicSettings, TopicStats]
    types += [t for t in vars(errors).values()
              if isinstance(t, type) and issubclass(t, errors.BusError)]
    return TypeRegistry(types)


def transferable(value: object, registry: TypeRegistry, depth: int = 0) -> bool:
    """Whether ``value`` decodes on the other side (builtins and allowed types only)."""
    if isinstance(value, _SCALARS):
        return True
    if depth > _MAX_DEPTH:
        return False
    if isinstance(value, list | tuple | set | frozenset):
        if type(value) not in (list, tuple, set, frozenset):
            return False
        return all(transferable(item, registry, depth + 1) for item in value)
    if isinstance(value, dict):
        return type(value) is dict and all(
            transferable(k, registry, depth + 1) and transferable(v, registry, depth + 1)
            for k, v in value.items()
        )
    return type(value) in registry


def wire_error(exc: BaseException, registry: TypeRegistry) -> BaseException:
    """``exc`` itself when it can cross, else a `RuntimeError` carrying its text."""
    kind = type(exc)
    crosses = (kind.__module__ == "builtins" or kind in registry) and transferable(
        exc.args, registry
    )
    if crosses and not getattr(exc, "__dict__", None):
        return exc
    return RuntimeError(f"{kind.__qualname__}: {exc}")
