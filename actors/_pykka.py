"""pykka fidelity: pykka's proxy messages, and a pykka `ActorRef` that reaches a live mailbox.

pykka's `ActorProxy` turns attribute reads, writes and method calls into `ProxyGetAttr`,
`ProxySetAttr` and `ProxyCall` messages sent through an `ActorRef`. `MailboxRef` is that
`ActorRef`, bound to a cell instead of one actor instance's inbox, so ``self.actor_ref``
and ``ref.proxy()`` keep working across restarts and for process actors.
"""

from __future__ import annotations

import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import pykka
from pykka import messages
from pykka._introspection import get_attr_directly, introspect_attrs

__all__ = [
    "PYKKA_MESSAGES", "DescribeAttrs", "Mailbox", "MailboxRef", "handle_pykka_message",
    "remote_proxy", "stand_in_for",
]


@dataclass(frozen=True, slots=True)
class DescribeAttrs:
    """Asks a (process) actor for the attribute table pykka's proxy introspects."""


# Messages the actor itself answers, the way pykka's own actor loop does; the rest go
# to ``on_receive``. ``_ActorStop`` is pykka's ``ActorRef.stop`` message.
PYKKA_MESSAGES = frozenset({messages.ProxyCall, messages.ProxyGetAttr, messages.ProxySetAttr,
                            messages._ActorStop, DescribeAttrs})


def handle_pykka_message(actor: Any, message: Any) -> Any:
    """Answer one of `PYKKA_MESSAGES` as pykka does."""
    cls = message.__class__
    if cls is messages.ProxyCall:
        return get_attr_directly(actor, message.attr_path)(*message.args, **message.kwargs)
    if cls is messages.ProxyGetAttr:
        return get_attr_directly(actor, message.attr_path)
    if cls is messages.ProxySetAttr:
        parent = get_attr_directly(actor, message.attr_path[:-1])
        return setattr(parent, message.attr_path[-1], message.value)
    if cls is DescribeAttrs:
        return introspect_attrs(root=actor, proxy=_NoProxy())  # type: ignore[arg-type]
    actor._actorbus_cell.begin_stop()  # messages._ActorStop: a final stop, as in pykka
    return None


def remote_proxy(mailbox: Mailbox, cls: type[pykka.Actor],
                 table: dict[Any, Any]) -> pykka.ActorProxy[Any]:
    """pykka's proxy for an actor of class ``cls`` living elsewhere (a process actor).

    ``table`` is the attribute table the actor itself reported (`DescribeAttrs`).
    Traversable attributes are known one level deep.
    """
    stand_in = stand_in_for(cls, table)
    ref = MailboxRef(mailbox, stand_in)
    ref.stand_in = stand_in  # the proxy holds the instance only weakly
    proxy = pykka.ActorProxy(actor_ref=ref)
    proxy._known_attrs = table
    return proxy


def stand_in_for(cls: type[pykka.Actor], table: dict[Any, Any]) -> pykka.Actor:
    """An uninitialised instance of ``cls`` whose top-level attributes match ``table``.

    pykka's proxy introspects a local instance; a process actor's lives in its child,
    so its proxy introspects this (built without running ``cls.__init__``).
    """
    stand_in = cls.__new__(cls)
    pykka.Actor.__init__(stand_in)
    for path, info in table.items():
        if len(path) == 1 and not any(path[0] in vars(k) for k in cls.__mro__):
            placeholder = (_Method() if info.callable
                           else _Traversable() if info.traversable else None)
            setattr(stand_in, path[0], placeholder)
    return stand_in


class _Method:
    """Stands in for a method set on the instance (the proxy sends its calls to the child)."""

    def __call__(self) -> None:
        raise TypeError("a stand-in attribute; the call goes to the process actor")


class _Traversable:
    """Stands in for a traversable attribute (only its first level is known to the proxy)."""

    pykka_traversable = True


class _NoProxy:
    """Compares unequal to every attribute (introspection outside a proxy)."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


class Mailbox(Protocol):
    """What `MailboxRef` needs from a cell (or from a process actor's stand-in for one)."""

    name: str

    def tell(self, message: Any) -> None: ...

    def ask(self, message: Any, timeout: float | None) -> Future[Any]: ...

    def is_alive(self) -> bool: ...

    def stop(self, timeout: float | None) -> None: ...

    def begin_stop(self) -> None: ...


class MailboxRef(pykka.ActorRef[Any]):
    """pykka's `ActorRef`, sending to a mailbox that outlives actor instances.

    ``actor`` is the instance pykka's proxy introspects (for a process actor, a stand-in
    of its class). Differences from pykka, as for `actors.Ref`: a tell to a stopped actor
    is dead-lettered, not raised.
    """

    stand_in: pykka.Actor | None = None

    def __init__(self, mailbox: Mailbox, actor: pykka.Actor) -> None:
        # pykka's __init__ would bind the ref to this instance's own inbox: not called.
        self._mailbox = mailbox
        self._actor_weakref = weakref.ref(actor)
        self.actor_class = type(actor)
        self.actor_urn = actor.actor_urn
        self.actor_inbox = actor.actor_inbox
        self.actor_stopped = actor.actor_stopped

    def __str__(self) -> str:  # as the actor's own: named by its mailbox, not by one urn
        return f"{self.actor_class.__name__} ({self._mailbox.name})"

    def is_alive(self) -> bool:
        return self._mailbox.is_alive()

    def tell(self, message: Any) -> None:
        self._mailbox.tell(message)

    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        self._mailbox.ask(message, None).add_done_callback(lambda done: _copy(done, future))
        return future.get(timeout=timeout) if block else future

    def stop(self, *, block: bool = True, timeout: float | None = None) -> Any:
        alive = self._mailbox.is_alive()
        if block:
            self._mailbox.stop(timeout)
            return alive
        self._mailbox.begin_stop()
        future: pykka.ThreadingFuture[bool] = pykka.ThreadingFuture()
        future.set(alive)
        return future


def _copy(done: Future[Any], future: pykka.ThreadingFuture[Any]) -> None:
    error = done.exception()
    if error is None:
        future.set(done.result())
    else:
        future.set_exception((type(error), error, error.__traceback__))
