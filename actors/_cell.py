"""A cell: the identity behind a `Ref`, outliving the actor instances it hosts."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pykka

from actors._dead_letters import DeadLetter, DeadLetterReason
from actors._events import Event, EventKind
from actors._ref import Ref
from actors.errors import ActorDeadError

if TYPE_CHECKING:
    from actors._spec import ChildSpec
    from actors._system_context import SystemContext

__all__ = ["Cell", "ChildExited", "ChildFailed", "ChildFinished", "StopChild"]


@dataclass(frozen=True, slots=True)
class ChildFailed:
    """To a supervisor: a child's incarnation failed (``restarted``: it restarted in place)."""

    cell: Cell
    error: BaseException
    restarted: bool = False


@dataclass(frozen=True, slots=True)
class ChildExited:
    """To a supervisor: a child stopped itself (a normal exit)."""

    cell: Cell


@dataclass(frozen=True, slots=True)
class ChildFinished:
    """To a supervisor: a child is gone for good; forget it."""

    cell: Cell


@dataclass(frozen=True, slots=True)
class StopChild:
    """To a supervisor: stop this child for good (``Ref.stop``)."""

    cell: Cell


class Cell:
    """What thread and process cells share: identity, lifecycle reporting, death.

    Subclasses implement ``tell``, ``ask``, ``start_incarnation``, ``stop_incarnation``,
    ``request_stop``, ``mailbox_size``, ``in_flight`` and ``_drain``.
    """

    kind = "thread"

    def __init__(self, system: SystemContext, spec: ChildSpec, parent: Ref | None) -> None:
        self.system = system
        self.spec = spec
        self.name = spec.id
        self.parent = parent
        self.ref = Ref(self)
        self.restarts = 0
        self.incarnations = 0
        self.dead = False
        self.stop_requested = False
        self.started = threading.Event()
        self.start_error: BaseException | None = None
        self.finished = threading.Event()
        self.children: list[Cell] = []  # a supervisor's children, kept across its restarts
        self._finish_lock = threading.Lock()

    # -- what every cell offers ---------------------------------------------------------
    def tell(self, message: Any) -> None:
        raise NotImplementedError

    def ask(self, message: Any, timeout: float | None) -> Future[Any]:
        raise NotImplementedError

    def start_incarnation(self) -> None:
        raise NotImplementedError

    def stop_incarnation(self, timeout: float) -> bool:
        raise NotImplementedError

    def request_stop(self) -> None:
        raise NotImplementedError

    def incarnation_active(self) -> bool:
        raise NotImplementedError

    def mailbox_size(self) -> int:
        raise NotImplementedError

    def in_flight(self) -> int:
        raise NotImplementedError

    def proxy(self) -> pykka.ActorProxy[Any]:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return None

    def _drain(self) -> None:
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------
    def stop(self, timeout: float | None) -> None:
        """Stop for good: queued mail is handled first; blocks up to ``timeout``."""
        if self.dead:
            return
        self.begin_stop()
        if self._on_own_thread():
            return
        if not self.finished.wait(timeout):
            self.finish("stopped")

    def begin_stop(self) -> None:
        """Ask for a final stop (through the supervisor, which then forgets the child)."""
        self.stop_requested = True
        # The stop goes into the mailbox at once (mail sent after it is refused, as in
        # pykka); the supervisor is told so that it forgets the child rather than restart it.
        self.request_stop()
        if self.parent is not None and self.parent.is_alive():
            self.parent.tell(StopChild(self))

    def _on_own_thread(self) -> bool:
        return False

    def finish(self, reason: DeadLetterReason = "stopped") -> None:
        """Mark the cell dead for good; pending mail goes to the dead letters."""
        with self._finish_lock:
            if self.dead:
                return
            self.dead = True
        for child in reversed(self.children):
            child.finish(reason)
        self.children.clear()
        self._drain()
        self.system.unregister(self)
        self.emit("stopped")
        self.finished.set()
        if not self.started.is_set():
            self.start_error = self.start_error or ActorDeadError(self.name, "stopped while starting")
            self.started.set()
        if self.parent is not None and self.parent.is_alive():
            self.parent.tell(ChildFinished(self))

    def is_alive(self) -> bool:
        return not self.dead

    # -- reporting ------------------------------------------------------------------------
    def emit(self, kind: EventKind, error: BaseException | None = None) -> None:
        self.system.events.emit(Event(kind=kind, name=self.name, error=error, at=time.time()))

    def dead_letter(self, message: Any, reason: DeadLetterReason) -> None:
        self.system.dead_letters.add(
            DeadLetter(message=message, recipient=self.name, reason=reason, at=time.time())
        )

    def refuse(self, message: Any, reply: Future[Any] | None, reason: DeadLetterReason) -> None:
        """A message that will never be handled: dead-letter it and fail its ask."""
        self.dead_letter(message, reason)
        if reply is not None:
            try:
                reply.set_exception(ActorDeadError(self.name, f"message dropped ({reason})"))
            except InvalidStateError:
                pass

    def running(self) -> None:
        """The current incarnation finished starting."""
        if self.incarnations == 1:
            self.emit("started")
        else:
            self.emit("restarted")
        self.started.set()

    def failed(self, error: BaseException, *, start: bool = False, restarted: bool = False) -> None:
        """The current incarnation failed; the supervisor decides what follows."""
        self.emit("failed", error)
        if start and not self.started.is_set():
            self.start_error = error
            self.started.set()
        if self.parent is not None:
            self.parent.tell(ChildFailed(self, error, restarted))
        else:
            self.emit("escalated", error)
