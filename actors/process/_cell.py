"""A cell whose actor lives in its own OS process."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

import pykka

from actors._actor import Actor
from actors._cell import Cell, ChildExited
from actors._pykka import DescribeAttrs, remote_proxy
from actors.errors import ActorDeadError, SpawnError, WorkerCrashedError
from actors.process import _wire as wire
from actors.process._affinity import process_cpus
from actors.process._channel import DEFAULT_STALL_TIMEOUT, Channel
from actors.process._child import child_main
from actors.process._child import heartbeat_period as _heartbeat_period
from actors.process._wire import dump_code, dump_message, load

if TYPE_CHECKING:
    from actors._ref import Ref
    from actors._spec import ChildSpec
    from actors._system_context import SystemContext

__all__ = ["ProcessCell"]

logger = logging.getLogger(__name__)

_HEARTBEAT_GRACE = 1.0  # seconds of silence tolerated beyond stuck_after

_Pending = tuple[str, Any, "bytes | None", "Future[Any] | None"]


class ProcessCell(Cell):
    """Mail is pickled at the sender and written to the live process's pipe.

    While no process runs (starting, restarting) mail waits here and goes to the next
    one. Mail the process had not handled when it died: asks fail with
    `WorkerCrashedError`, tells go to the dead letters as ``"crashed"``.
    """

    kind = "process"

    def __init__(self, system: SystemContext, spec: ChildSpec, parent: Ref | None) -> None:
        super().__init__(system, spec, parent)
        try:
            self._code = dump_code((spec.factory, tuple(spec.args), dict(spec.kwargs), spec.stuck_after))
        except Exception as exc:
            raise SpawnError(self.name, f"factory or arguments do not pickle: {exc}") from exc
        self._lock = threading.Lock()
        self._channel: Channel | None = None  # accepting mail
        self._live: Channel | None = None  # started and not reaped yet
        self._reaped = threading.Event()
        self._reaped.set()
        self._pending: list[_Pending] = []

    # -- senders ------------------------------------------------------------------------
    def tell(self, message: Any) -> None:
        self._send(wire.TELL, message, dump_message(self.name, message), None)

    def ask(self, message: Any, timeout: float | None) -> Future[Any]:
        payload = dump_message(self.name, message)
        future: Future[Any] = Future()
        if self.dead:  # as for a thread actor: the ask fails, it is not a dead letter
            future.set_exception(ActorDeadError(self.name))
            return future
        if timeout is not None:
            self.system.scheduler.expire_ask(future, self.name, timeout)
        self._send(wire.ASK, message, payload, future)
        return future

    def _send(self, kind: str, message: Any, payload: bytes | None, reply: Future[Any] | None) -> None:
        with self._lock:
            channel = None if self.dead else self._channel
            if channel is not None:
                channel.enqueue(kind, message, payload, reply)
            elif not self.dead:
                self._pending.append((kind, message, payload, reply))
                return
        if channel is None:
            self.refuse(message, reply, "stopped")
        elif reply is None and channel.bursting():
            self.system.schedule_write(channel)  # batched by the writer thread
        else:
            channel.flush()

    def mailbox_size(self) -> int:
        live = self._live
        return len(self._pending) + (live.in_flight() if live else 0)

    def in_flight(self) -> int:
        return self.mailbox_size()

    def proxy(self) -> pykka.ActorProxy[Any]:
        """pykka's proxy over the pipe; introspects a stand-in built from the child's table.

        Blocks up to a minute for the child's attribute table.
        """
        factory = self.spec.factory
        if not (isinstance(factory, type) and issubclass(factory, Actor)):
            raise TypeError(f"proxy() of process actor {self.name!r} needs its factory to be "
                            f"an importable Actor class, not {factory!r}")
        if self.dead:
            raise ActorDeadError(self.name)
        return remote_proxy(self, factory, self.ask(DescribeAttrs(), 60.0).result())

    @property
    def pid(self) -> int | None:
        live = self._live
        return live.process.pid if live else None

    # -- supervisor side ----------------------------------------------------------------
    def start_incarnation(self) -> None:
        """Start a process and hand it the pending mail (does not wait for it to run)."""
        context = self.system.process_host()
        parent_conn, child_conn = context.Pipe(duplex=True)
        process = context.Process(
            target=child_main, args=(child_conn, self.name, process_cpus()),
            name=f"actorbus:{self.name}",
        )
        process.start()
        child_conn.close()
        parent_conn.send_bytes(self._code)
        stuck_after = self.spec.stuck_after
        channel = Channel(process, parent_conn, self._lock, DEFAULT_STALL_TIMEOUT
                          if stuck_after is None else stuck_after + _HEARTBEAT_GRACE)
        with self._lock:
            self.incarnations += 1
            for item in self._pending:
                channel.enqueue(*item)
            self._pending.clear()
            self._channel = self._live = channel
            self._reaped.clear()
        self.system.adopt_process(self, channel)
        channel.flush()
        if self.spec.stuck_after is not None:
            self._watch(channel, self.spec.stuck_after)

    def _watch(self, channel: Channel, stuck_after: float) -> None:
        """Kill the process when its heartbeats stop (a watchdog in it reports hung handlers)."""
        if channel.reaped or not channel.process.is_alive():
            return
        if time.monotonic() - channel.last_heard > stuck_after + _HEARTBEAT_GRACE:
            channel.process.kill()  # the reaper reports the crash and the supervisor replaces it
            return
        self.system.scheduler.call_later(_heartbeat_period(stuck_after),
                                         lambda: self._watch(channel, stuck_after))

    def incarnation_active(self) -> bool:
        return self._live is not None

    def request_stop(self) -> None:
        self._ask_to_stop()

    def stop_incarnation(self, timeout: float) -> bool:
        """Stop the live process after what it was sent; new mail waits for the next one."""
        live = self._ask_to_stop()
        if live is None:
            return True
        live.process.join(timeout)
        ended = not live.process.is_alive()
        live.end()
        return self._reaped.wait(timeout + 2.0) and ended

    def _ask_to_stop(self) -> Channel | None:
        with self._lock:
            live = self._live
            if live is None:
                return None
            self._channel = None
            if live.stopping:
                return live
            live.stopping = True
            live.enqueue(wire.STOP, None, None, None)
        live.flush()
        return live

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            live, self._channel = self._live, None
            if live is not None:
                live.stopping = True
        for _, message, _, reply in pending:
            self.refuse(message, reply, "stopped")
        if live is not None:
            live.end()

    # -- called by the I/O thread ---------------------------------------------------------
    def on_frame(self, channel: Channel, items: list[tuple[Any, ...]]) -> None:
        channel.last_heard = time.monotonic()
        for item in items:
            tag = item[0]
            if tag == wire.REPLY:
                with self._lock:
                    reply = channel.asks.pop(item[1], None)
                if reply is not None:
                    self._settle(channel, reply, item[2], item[3])
            elif tag == wire.DONE:
                with self._lock:
                    channel.acked(item[1])
            elif tag == wire.TELL_FAILED:
                self._tell_failed(channel, item[1], self._load_error(item[2]))
            elif tag in (wire.READY, wire.RESTARTED):
                self.running()
            elif tag == wire.START_FAILED:
                channel.start_failed = True
                self.failed(SpawnError(self.name, repr(self._load_error(item[1]))), start=True)
            elif tag == wire.EXITED:
                channel.exited_normally = True

    def _settle(self, channel: Channel, reply: Future[Any], ok: bool, payload: bytes) -> None:
        """Resolve one ask; a reply that does not load here fails that ask alone."""
        try:
            value = load(payload)
        except Exception as exc:
            ok, value = False, _not_loadable(self.name, "reply", exc)
        if not ok:
            logger.info("Exception returned from %s to caller:", self._label(), exc_info=value)
            if isinstance(value, SystemExit):
                channel.exit_replies.append((reply, value))
                return
        try:
            if ok:
                reply.set_result(value)
            else:
                reply.set_exception(value)
        except InvalidStateError:
            pass

    def _label(self) -> str:
        """How pykka names an actor in its logs: ``Class (name)``."""
        return f"{getattr(self.spec.factory, '__name__', 'Actor')} ({self.name})"

    def _load_error(self, payload: bytes) -> BaseException:
        try:
            error = load(payload)
        except Exception as exc:
            return _not_loadable(self.name, "error", exc)
        return error if isinstance(error, BaseException) else RuntimeError(repr(error))

    def _tell_failed(self, channel: Channel, seq: int, error: BaseException) -> None:
        logger.error("Unhandled exception in %s:", self._label(), exc_info=error)
        with self._lock:
            channel.acked(seq - 1)
            failed = channel.tells.popleft() if channel.tells and channel.tells[0][0] == seq else None
            # The child restarted in place: counted here, before its RESTARTED frame (read
            # next on this thread) emits "restarted", so status() never lags the event.
            self.incarnations += 1
            self.restarts += 1
        if failed is not None:
            self.dead_letter(failed[1], "crashed")
        self.failed(error, restarted=True)

    def process_exited(self, channel: Channel, exitcode: int | None) -> None:
        """The process is gone: settle what it left, then report why it went."""
        with self._lock:
            if self._channel is channel:
                self._channel = None
            if self._live is channel:
                self._live = None
            asks, channel.asks = channel.asks, {}
            tells = list(channel.tells)
            channel.tells.clear()
        self._reaped.set()
        crashed = not channel.stopping and not channel.exited_normally
        error: BaseException = (
            WorkerCrashedError(self.name, exitcode) if crashed else ActorDeadError(self.name)
        )
        reason = "crashed" if crashed else ("stopped" if self.stop_requested else "restarting")
        # The child handles its mail in order: only the oldest unanswered message can
        # have been running; asks behind it never started.
        oldest = min([*asks, *(seq for seq, _ in tells)], default=0)
        for seq, reply in asks.items():
            _fail(reply, error if not crashed or seq == oldest
                  else WorkerCrashedError(self.name, exitcode, started=False))
        for _, message in tells:
            self.dead_letter(message, reason)  # type: ignore[arg-type]
        self._report_exit(channel, crashed, error)
        for reply, exit_error in channel.exit_replies:
            _fail(reply, exit_error)

    def _report_exit(self, channel: Channel, crashed: bool, error: BaseException) -> None:
        if channel.stopping:
            if self.stop_requested:
                self.finish("stopped")
        elif channel.start_failed:
            pass  # already reported
        elif crashed:
            self.failed(error, start=not self.started.is_set())
        elif self.parent is not None:
            self.parent.tell(ChildExited(self))
        else:
            self.finish("stopped")


def _not_loadable(name: str, what: str, exc: Exception) -> TypeError:
    error = TypeError(f"the {what} of process actor {name!r} cannot be unpickled in the "
                      f"parent: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _fail(reply: Future[Any], error: BaseException) -> None:
    try:
        reply.set_exception(error)
    except InvalidStateError:
        pass
