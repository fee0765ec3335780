"""The actor base class: a pykka ThreadingActor with a SimpleQueue inbox and one failure path."""

from __future__ import annotations

import functools
import logging
import queue
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any, NoReturn, cast

import pykka

from actors._pykka import PYKKA_MESSAGES, handle_pykka_message

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
    pykka's proxy messages are answered as pykka does (``ref.proxy()``), and
    ``self.actor_ref`` is a pykka ref to the live mailbox. Actors are created by an
    `ActorSystem` (``spawn``, ``supervise``, ``pool``), never with pykka's ``start()``.
    An exception from ``on_receive`` fails the ask that caused it (logged at INFO; the
    actor carries on), or, for a tell, is logged at ERROR and reported to the supervisor,
    which restarts a fresh instance on the same mailbox. A `BaseException` that is not an
    `Exception` (``SystemExit``, ``KeyboardInterrupt``) always fails the actor.
    """

    use_daemon_thread = True
    _actorbus_cell: Any = None

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: actors are started by an `ActorSystem`.

        Raises:
            TypeError: always; use ``ActorSystem.spawn(cls, ...)``.
        """
        raise TypeError(
            f"{cls.__name__}.start(): an actors.Actor is started by an ActorSystem; "
            f"use system.spawn({cls.__name__}, ...) (or supervise()/pool())"
        )

    def __str__(self) -> str:
        cell = self._actorbus_cell  # named by its cell (stable across restarts), not its urn
        return f"{type(self).__name__} ({cell.name if cell is not None else self.actor_urn})"

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

    def _handle_receive(self, message: Any) -> Any:
        if message.__class__ in PYKKA_MESSAGES:
            return handle_pykka_message(self, message)
        return self.on_receive(message)

    def _actor_loop(self) -> None:
        cell = self._actorbus_cell
        try:
            self.on_start()
        except BaseException as exc:
            logger.error("Unhandled exception in %s:", self, exc_info=exc)
            cell.incarnation_failed(self, exc, start=True)
            return
        cell.incarnation_running(self)
        get = cast("queue.SimpleQueue[tuple[Any, Any]]", self.actor_inbox).get
        receive, handle = self.on_receive, functools.partial(handle_pykka_message, self)
        while True:
            message, reply = get()
            if reply is None:
                try:
                    (handle if message.__class__ in PYKKA_MESSAGES else receive)(message)
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
                    result = (handle if message.__class__ in PYKKA_MESSAGES else receive)(message)
                except Exception as exc:
                    logger.info("Exception returned from %s to caller:", self, exc_info=exc)
                    _fail(reply, exc)
                    cell.ask_failed(self, exc)
                except BaseException as exc:  # SystemExit & co: the caller learns, the actor fails
                    _fail(reply, exc)
                    self._report_failure(exc)
                    cell.incarnation_failed(self, exc, message=message, answered=True)
                    return
                else:
                    _answer(reply, result)

    def _report_failure(self, exc: BaseException) -> None:
        logger.error("Unhandled exception in %s:", self, exc_info=exc)
        try:
            self.on_failure(type(exc), exc, exc.__traceback__)
        except Exception as error:
            logger.error("Unhandled exception in %s:", self, exc_info=error)

    def _stop_incarnation(self) -> None:
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception as error:
            logger.error("Unhandled exception in %s:", self, exc_info=error)


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

