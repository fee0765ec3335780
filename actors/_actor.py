"""The actor base class: a pykka ThreadingActor with a SimpleQueue inbox and one failure path."""

from __future__ import annotations

import logging
import queue
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any, cast

import pykka

if TYPE_CHECKING:
    from actors._ref import Ref

__all__ = ["EXIT", "RESTART", "STOP", "Actor", "Control"]

logger = logging.getLogger(__name__)


class Control:
    """A marker put in a mailbox in the reply slot: ends the running incarnation."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


STOP = Control("stop")  # final: handle what is queued before it, then stop for good
RESTART = Control("restart")  # the supervisor ends this incarnation; the mailbox survives
EXIT = Control("exit")  # the actor stopped itself: a normal exit, the restart kind decides


class Actor(pykka.ThreadingActor):
    """Base class of every actor. Implement ``on_receive(message)``; its result answers an ask.

    Hooks keep pykka's names: ``on_start()``, ``on_stop()``, ``on_failure(type, value, tb)``.
    Actors are created by an `ActorSystem` (``spawn``, ``supervise``, ``pool``), never with
    pykka's ``start()``. An exception from ``on_receive`` fails the ask that caused it
    (the actor carries on), or, for a tell, is reported to the supervisor, which restarts
    a fresh instance on the same mailbox.
    """

    use_daemon_thread = True
    _actorbus_cell: Any = None

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()

    @property
    def ref(self) -> Ref:
        """This actor's stable `Ref` (valid across restarts)."""
        return self._actorbus_cell.ref  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Stop this actor from inside (a normal exit; the restart kind decides what follows)."""
        self._actorbus_cell.inbox.put((None, EXIT))

    def _actor_loop(self) -> None:
        cell = self._actorbus_cell
        try:
            self.on_start()
        except BaseException as exc:
            cell.incarnation_failed(self, exc, start=True)
            return
        cell.incarnation_running(self)
        get = cast("queue.SimpleQueue[tuple[Any, Any]]", self.actor_inbox).get
        receive = self.on_receive
        while True:
            message, reply = get()
            if reply is None:
                try:
                    receive(message)
                except BaseException as exc:
                    self._report_failure(exc)
                    cell.incarnation_failed(self, exc, message=message)
                    return
            elif reply.__class__ is Control:
                self._stop_incarnation()
                cell.incarnation_ended(self, reply)
                return
            else:
                try:
                    result = receive(message)
                except Exception as exc:
                    _fail(reply, exc)
                    cell.ask_failed(self, exc)
                else:
                    _answer(reply, result)

    def _report_failure(self, exc: BaseException) -> None:
        try:
            self.on_failure(type(exc), exc, exc.__traceback__)
        except Exception:
            logger.exception("on_failure of %s raised", self)

    def _stop_incarnation(self) -> None:
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            logger.exception("on_stop of %s raised", self)


def _answer(reply: Future[Any], result: Any) -> None:
    try:
        reply.set_result(result)
    except InvalidStateError:  # the ask timed out (or was cancelled) meanwhile
        pass


def _fail(reply: Future[Any], exc: BaseException) -> None:
    try:
        reply.set_exception(exc)
    except InvalidStateError:
        pass

