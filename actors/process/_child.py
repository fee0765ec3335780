"""The process side of a process actor: hosts the actor and serves its pipe."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from actors._actor import EXIT
from actors._pykka import PYKKA_MESSAGES, MailboxRef, handle_pykka_message
from actors.process import _wire as wire
from actors.process._affinity import apply_process_cpus
from actors.process._outbox import Outbox
from actors.process._wire import PROTOCOL, ExitCode, dump_error, load

__all__ = ["child_main"]

logger = logging.getLogger(__name__)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when the process that forked us dies."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_main(conn: Connection, name: str, cpus: frozenset[int] | None = None) -> None:
    """Entry point of a process actor's process (on ``cpus``, if given: `pin_threads`)."""
    apply_process_cpus(cpus)
    _die_with_parent()
    # Its own process group, so whatever its handlers start dies with it: the parent
    # kills the group when this process ends (PR_SET_PDEATHSIG is not inherited).
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    factory, args, kwargs, stuck_after = cloudpickle.loads(conn.recv_bytes())
    _ChildHost(conn, name, factory, args, kwargs, stuck_after).serve()


def heartbeat_period(stuck_after: float) -> float:
    """How often a watched process reports (and its parent checks) liveness."""
    return min(1.0, max(0.05, stuck_after / 4))


class _LocalInbox:
    """What ``Actor.stop()`` reaches inside the child."""

    def __init__(self, items: queue.SimpleQueue[tuple[str, int, Any]]) -> None:
        self._items = items

    def put(self, envelope: tuple[Any, Any]) -> None:
        message, reply = envelope
        if reply is EXIT:
            self._items.put((wire.LOCAL_EXIT, 0, None))
        else:
            self._items.put((wire.LOCAL_TELL, 0, message))


class _LocalSelf:
    """Stands in for the parent's cell inside the child (``self.ref``, ``self.actor_ref``)."""

    def __init__(self, name: str, items: queue.SimpleQueue[tuple[str, int, Any]]) -> None:
        self.name = name
        self.inbox = _LocalInbox(items)
        self.ref = self
        self._items = items

    def tell(self, message: Any) -> None:
        self._items.put((wire.LOCAL_TELL, 0, message))

    def ask(self, message: Any, timeout: float | None = None) -> Future[Any]:
        future: Future[Any] = Future()
        self._items.put((wire.LOCAL_ASK, 0, (message, future)))
        return future

    def is_alive(self) -> bool:
        return True

    def begin_stop(self) -> None:
        self._items.put((wire.LOCAL_EXIT, 0, None))

    def stop(self, timeout: float | None = None) -> None:
        self.begin_stop()


class _ChildHost:
    def __init__(self, conn: Connection, name: str, factory: Any, args: Any, kwargs: Any,
                 stuck_after: float | None) -> None:
        self.conn = conn
        self.name = name
        self.factory, self.args, self.kwargs = factory, args, kwargs
        self.items: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
        self.send_lock = threading.Lock()
        self.out = Outbox(self._send)
        self.actor: Any = None
        self.stuck_after = stuck_after
        self.busy_since = 0.0  # when the running handler started; 0.0 while idle

    def serve(self) -> None:
        try:
            self._incarnate()
        except BaseException as exc:
            self._send([(wire.START_FAILED, dump_error(exc))])
            os._exit(ExitCode.START_FAILED)
        self._send([(wire.READY, os.getpid())])
        threading.Thread(target=self._read, name=f"{self.name}-reader", daemon=True).start()
        threading.Thread(target=self.out.run_flusher, name=f"{self.name}-flusher",
                         daemon=True).start()
        if self.stuck_after is not None:
            threading.Thread(target=self._watchdog, args=(self.stuck_after,),
                             name=f"{self.name}-watchdog", daemon=True).start()
        self._loop()

    def _watchdog(self, stuck_after: float) -> None:
        """Heartbeats for the parent; a handler past ``stuck_after`` ends the process."""
        period = heartbeat_period(stuck_after)
        while True:
            time.sleep(period)  # a periodic timer on its own thread, not a synchronisation
            since = self.busy_since
            if since and time.monotonic() - since > stuck_after:
                logger.error("actor %s: handler stuck for over %ss; exiting", self.name, stuck_after)
                os._exit(ExitCode.STUCK)
            self._send([(wire.HEARTBEAT,)])

    def _incarnate(self) -> None:
        from actors._thread_cell import build_actor

        actor = build_actor(self.factory, self.args, self.kwargs, self.name)
        local = _LocalSelf(self.name, self.items)
        actor._actorbus_cell = local
        actor._actor_ref = MailboxRef(local, actor)
        actor.on_start()
        self.actor = actor

    def _read(self) -> None:
        put = self.items.put
        try:
            while True:
                for item in load(self.conn.recv_bytes()):
                    put(item)
        except (EOFError, OSError):
            os._exit(ExitCode.NORMAL)  # the parent is gone: never outlive it
        except BaseException:
            # A process that no longer reads its mail would let the parent's sends pile
            # up unanswered while its heartbeats say it is fine: end it, loudly.
            logger.exception("actor %s: its mail reader failed; exiting", self.name)
            os._exit(ExitCode.READER_FAILED)

    def _loop(self) -> None:
        get, out, empty = self.items.get, self.out, self.items.empty
        while True:
            kind, seq, payload = get()
            self.busy_since = started = time.monotonic()
            if out.waiting and not out.armed:
                out.arm()
            if kind == wire.TELL:
                self._tell(seq, payload)
            elif kind == wire.ASK:
                self._ask(seq, payload)
            elif kind == wire.LOCAL_TELL:
                self._call(payload, seq)
            elif kind == wire.LOCAL_ASK:
                self._local_ask(*payload)
            elif kind == wire.STOP:
                self._stop((wire.STOPPED,))
            elif kind == wire.LOCAL_EXIT:
                self._stop((wire.EXITED,))
            self.busy_since = 0.0
            if out.waiting and (empty() or out.due(started)):
                out.flush()

    def _handle(self, message: Any) -> Any:
        if message.__class__ in PYKKA_MESSAGES:
            return handle_pykka_message(self.actor, message)
        return self.actor.on_receive(message)

    def _call(self, message: Any, seq: int) -> None:
        try:
            self._handle(message)
        except BaseException as exc:
            self._fail(seq, exc)

    def _fail(self, seq: int, exc: BaseException) -> None:
        """A handler failed the actor: ``SystemExit`` ends the process, the rest restart it."""
        if isinstance(exc, SystemExit):
            self.out.flush()
            os._exit(exc.code if isinstance(exc.code, int) else 1)
        self._restart(seq, exc)

    def _tell(self, seq: int, payload: bytes) -> None:
        try:
            message = load(payload)
        except BaseException as exc:
            self._restart(seq, exc)
        else:
            self._call(message, seq)
        self.out.told(seq)

    def _ask(self, seq: int, payload: bytes) -> None:
        try:
            result = self._handle(load(payload))
        except Exception as exc:
            self.out.add((wire.REPLY, seq, False, dump_error(exc)))
            return
        except BaseException as exc:  # SystemExit & co: the caller learns, the actor fails
            self.out.add((wire.REPLY, seq, False, dump_error(exc)))
            self._fail(seq, exc)
            return
        try:
            data = pickle.dumps(result, protocol=PROTOCOL)
        except Exception as exc:
            data = dump_error(TypeError(f"reply of actor {self.name!r} cannot be pickled: {exc}"))
            self.out.add((wire.REPLY, seq, False, data))
            return
        self.out.add((wire.REPLY, seq, True, data))

    def _local_ask(self, message: Any, future: Future[Any]) -> None:
        try:
            future.set_result(self._handle(message))
        except Exception as exc:
            future.set_exception(exc)
        except BaseException as exc:
            future.set_exception(exc)
            self._fail(0, exc)

    def _restart(self, seq: int, exc: BaseException) -> None:
        """A tell failed: report it, then carry on with a fresh instance on the same queue."""
        with contextlib.suppress(Exception):
            self.actor.on_failure(type(exc), exc, exc.__traceback__)
        self.out.add((wire.TELL_FAILED, seq, dump_error(exc)))
        self.out.flush()
        try:
            self._incarnate()
        except BaseException:
            logger.exception("actor %s could not restart in its process", self.name)
            os._exit(ExitCode.RESTART_FAILED)
        self.out.add((wire.RESTARTED,))

    def _stop(self, last: tuple[Any, ...]) -> None:
        with contextlib.suppress(Exception):
            self.actor.on_stop()
        self.out.add(last)
        self.out.flush()
        os._exit(ExitCode.NORMAL)

    def _send(self, items: list[tuple[Any, ...]]) -> None:
        with self.send_lock:
            try:
                self.conn.send_bytes(pickle.dumps(items, protocol=PROTOCOL))
            except OSError:
                os._exit(ExitCode.NORMAL)

