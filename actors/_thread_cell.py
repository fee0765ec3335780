"""A cell whose actor runs on a thread of this process."""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import pykka

from actors._actor import RESTART, STOP, Actor, Control
from actors._cell import Cell, ChildExited
from actors._pykka import MailboxRef
from actors.errors import ActorDeadError, SpawnError

if TYPE_CHECKING:
    from actors._ref import Ref
    from actors._spec import ChildSpec
    from actors._system_context import SystemContext

__all__ = ["ThreadCell", "build_actor"]


def build_actor(factory: Any, args: Sequence[Any], kwargs: Mapping[str, Any], name: str) -> Actor:
    """Create the actor a factory describes (a nested supervisor for a SupervisorSpec)."""
    from actors._spec import SupervisorSpec
    from actors._supervisor import Supervisor

    if isinstance(factory, SupervisorSpec):
        return Supervisor(factory)
    actor = factory(*args, **kwargs)
    if not isinstance(actor, Actor):
        raise SpawnError(name, f"factory returned {type(actor).__name__}, not an actors.Actor")
    return actor


class ThreadCell(Cell):
    """The mailbox lives here, so queued mail survives every restart of the actor."""

    kind = "thread"

    def __init__(self, system: SystemContext, spec: ChildSpec, parent: Ref | None) -> None:
        super().__init__(system, spec, parent)
        self.inbox: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        self.actor: Actor | None = None
        self._thread_ident: int | None = None
        self._done = threading.Event()
        self._done.set()

    # -- senders ------------------------------------------------------------------------
    def tell(self, message: Any) -> None:
        self.inbox.put((message, None))
        if self.dead:
            self._drain()

    def ask(self, message: Any, timeout: float | None) -> Future[Any]:
        future: Future[Any] = Future()
        if self.dead:
            future.set_exception(ActorDeadError(self.name))
            return future
        if timeout is not None:
            self.system.scheduler.expire_ask(future, self.name, timeout)
        self.inbox.put((message, future))
        if self.dead:
            self._drain()
        return future

    def mailbox_size(self) -> int:
        return self.inbox.qsize()

    def in_flight(self) -> int:
        return self.inbox.qsize() + (0 if self._done.is_set() else 1)

    def _drain(self) -> None:
        while True:
            try:
                message, reply = self.inbox.get_nowait()
            except queue.Empty:
                break
            if reply is None or reply.__class__ is not Control:
                self.refuse(message, reply, "stopped")
        if not self._done.is_set():
            # a running (or abandoned) loop must still find its way out
            self.inbox.put((None, STOP))

    def _on_own_thread(self) -> bool:
        return threading.get_ident() == self._thread_ident

    # -- supervisor side ----------------------------------------------------------------
    def start_incarnation(self) -> None:
        """Build a fresh instance on the same mailbox and start its thread (does not wait)."""
        spec = self.spec
        actor = build_actor(spec.factory, spec.args, spec.kwargs, self.name)
        actor.actor_inbox = self.inbox  # type: ignore[assignment]
        actor._actorbus_cell = self
        actor._actor_ref = MailboxRef(self, actor)
        self.actor = actor
        self.incarnations += 1
        self._done.clear()
        actor._start_actor_loop()

    def incarnation_active(self) -> bool:
        return not self._done.is_set()

    def proxy(self) -> pykka.ActorProxy[Any]:
        actor = self.actor
        if actor is None or self.dead:
            raise ActorDeadError(self.name)
        return pykka.ActorProxy(actor_ref=actor.actor_ref)

    def request_stop(self) -> None:
        self.inbox.put((None, STOP))

    def stop_incarnation(self, timeout: float) -> bool:
        """End the running incarnation, keeping the mailbox. True when it ended in time."""
        if self._done.is_set():
            return True
        self.inbox.put((None, RESTART))
        return self._done.wait(timeout)

    # -- called on the actor's own thread -------------------------------------------------
    def incarnation_running(self, actor: Actor) -> None:
        self._thread_ident = threading.get_ident()
        self.running()

    def incarnation_failed(self, actor: Actor, error: BaseException, *, start: bool = False,
                           message: Any = None, answered: bool = False) -> None:
        if not start and not answered:
            self.dead_letter(message, "crashed")
        self._done.set()
        self.failed(error, start=start)

    def ask_failed(self, actor: Actor, error: BaseException) -> None:
        self.emit("failed", error)

    def incarnation_ended(self, actor: Actor, control: Control) -> None:
        self._done.set()
        if control is STOP:
            self.finish("stopped")
        elif control is not RESTART and self.parent is not None:
            self.parent.tell(ChildExited(self))
        elif control is not RESTART:
            self.finish("stopped")
