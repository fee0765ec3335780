"""ActorSystem: names, the root supervisor, process plumbing and an orderly shutdown."""

from __future__ import annotations

import functools
import itertools
import logging
import multiprocessing
import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psutil

from actors._cell import Cell
from actors._dead_letters import DeadLetters
from actors._events import Events
from actors._ref import Ref
from actors._scheduler import Scheduler
from actors._spec import ChildSpec, SupervisorSpec
from actors._status import ActorStatus, ProcessMeter
from actors._supervisor import AddChild, ShutdownChildren, Supervisor
from actors._thread_cell import ThreadCell
from actors.errors import ActorNotFoundError, NameTakenError, SpawnError
from actors.process._cell import ProcessCell
from actors.process._io import IOLoop

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from actors._pool import Pool, Router
    from actors.process._channel import Channel

__all__ = ["ActorSystem"]

logger = logging.getLogger(__name__)

_START_TIMEOUT = 60.0


def _default_start_method() -> str:
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


class ActorSystem:
    """Owns actors, their names, a root supervisor, and every thread and process they use.

    Use it as a context manager, or call `shutdown()`.

    Args:
        name: the system's name (also its root supervisor's).
        start_method: ``"forkserver"`` (Linux default) or ``"spawn"``. ``"fork"`` is
            refused: actors are threads, and forking a threaded process is unsafe.

    Raises:
        ValueError: for ``"fork"`` or a start method this platform lacks.
    """

    def __init__(self, name: str = "actors", *, start_method: str | None = None) -> None:
        method = start_method or _default_start_method()
        if method == "fork":
            raise ValueError("start_method 'fork' is refused: actors are threads, and "
                             "forking a threaded process is unsafe; use 'forkserver' or 'spawn'")
        if method not in multiprocessing.get_all_start_methods():
            raise ValueError(f"start method {method!r} is not available here")
        self.name = name
        self.start_method = method
        self.dead_letters = DeadLetters()
        self.events = Events()
        self.scheduler = Scheduler(name)
        self._context: BaseContext | None = None
        self._io: IOLoop | None = None
        self._lock = threading.Lock()
        self._cells: dict[str, Cell] = {}
        self._processes: list[Channel] = []
        self._auto_names = itertools.count(1)
        self._meter = ProcessMeter()
        self._closed = False
        root = ChildSpec(id=name, factory=functools.partial(
            Supervisor, SupervisorSpec(children=()), root=True))
        self._root = self.make_cell(root, None)
        self._root.start_incarnation()
        self._root.started.wait(_START_TIMEOUT)

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> ActorSystem:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()

    # -- public API ---------------------------------------------------------------------------
    def spawn(self, factory: Any, *args: Any, name: str | None = None, process: bool = False,
              **kwargs: Any) -> Ref:
        """Start an actor under the root supervisor and return its Ref once it runs.

        The actor is a ``transient`` child: a failing tell handler restarts it, a normal
        stop (``self.stop()``, ``ref.stop()``) is final. Past its own restart budget
        (`SupervisorSpec`'s defaults) it is stopped alone, with an ``"escalated"`` event.

        Blocks until the actor's ``on_start`` returned (a process actor: until its
        process runs it). ``factory`` is an `Actor` subclass or a callable returning one;
        ``args``/``kwargs`` go to it. With ``process=True`` the actor lives in its own
        OS process; factory and arguments are cloudpickled once, here.

        Raises:
            NameTakenError: ``name`` is in use.
            SpawnError: the actor could not be built or started.
        """
        spec = ChildSpec(id=name or self._auto_name(factory), factory=factory, args=args,
                         kwargs=kwargs, restart="transient", process=process)
        return self.start_child(self._root.ref, spec)

    def supervise(self, spec: SupervisorSpec, *, name: str | None = None) -> Ref:
        """Start a supervisor (under the root) and return once every child of it runs.

        When the tree gives up (more than its ``max_restarts`` within ``within``), the
        root stops it alone and emits ``"escalated"`` with its `RestartLimitError`.

        Raises:
            NameTakenError: the supervisor's name or a child's id is in use.
            SpawnError: a child could not be started.
        """
        child = ChildSpec(id=name or f"supervisor-{next(self._auto_names)}", factory=spec)
        return self.start_child(self._root.ref, child)

    def pool(self, factory: Any, *args: Any, size: int, process: bool = True,
             router: Router = "least_busy", name: str | None = None,
             stuck_after: float | None = None, **kwargs: Any) -> Pool:
        """Start a supervised pool of ``size`` identical actors; returns once all run.

        ``stuck_after`` (process pools): a member whose handler runs longer than this,
        or whose process stops sending heartbeats, is killed and replaced.

        Raises:
            ValueError: ``size`` < 1 or an unknown router.
        """
        from actors._pool import Pool

        return Pool(self, factory, args, kwargs, size=size, process=process, router=router,
                    name=name or f"pool-{next(self._auto_names)}", stuck_after=stuck_after)

    def lookup(self, name: str) -> Ref:
        """The Ref of the actor called ``name``.

        Raises:
            ActorNotFoundError: no such actor.
        """
        cell = self._cells.get(name)
        if cell is None:
            raise ActorNotFoundError(name)
        return cell.ref

    def status(self) -> dict[str, ActorStatus]:
        """A snapshot of every actor, keyed by name (psutil figures for process actors)."""
        with self._lock:
            cells = list(self._cells.values())
        return {cell.name: self._meter.status(cell) for cell in cells}

    def shutdown(self, *, timeout: float = 10.0) -> None:
        """Stop everything within ``timeout`` seconds in all; never hangs.

        Children stop in reverse start order (their queued mail first, as far as the
        budget allows); then any process still running gets SIGTERM, then SIGKILL, and
        its descendants are swept. Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + timeout
        with self._lock:
            descendants = _descendants([c.process for c in self._processes])
        try:
            self._root.ref.ask(ShutdownChildren(deadline - 0.25 * timeout), timeout=None).result(
                max(0.0, deadline - time.monotonic()))
        except Exception:
            logger.warning("system %s: children did not stop in time", self.name, exc_info=True)
        self._root.stop(max(0.0, deadline - time.monotonic()))
        self._end_processes(deadline)
        for proc in descendants:  # whatever our process actors started, gone or not
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if self._io is not None:
            self._io.stop(max(0.1, deadline - time.monotonic()))
        self.scheduler.stop(max(0.1, deadline - time.monotonic()))

    # -- used by supervisors, cells and pools ---------------------------------------------------
    def start_child(self, supervisor: Ref, spec: ChildSpec) -> Ref:
        """Have ``supervisor`` start ``spec`` and wait until it runs."""
        self._check_open()
        cell = self.make_cell(spec, supervisor)
        try:
            supervisor.ask(AddChild(cell), timeout=None).result(_START_TIMEOUT)
        except BaseException:
            cell.finish("stopped")
            raise
        return self.await_started(cell)

    def await_started(self, cell: Cell) -> Ref:
        if not cell.started.wait(_START_TIMEOUT):
            cell.ref.stop(timeout=1.0)
            raise SpawnError(cell.name, f"not running after {_START_TIMEOUT}s")
        if cell.start_error is not None:
            error = cell.start_error
            if isinstance(error, SpawnError):
                raise error
            raise SpawnError(cell.name, repr(error)) from error
        return cell.ref

    def make_cell(self, spec: ChildSpec, parent: Ref | None) -> Cell:
        """Create (and name-register) the cell for ``spec``; starts nothing."""
        cell: Cell = (ProcessCell if spec.process else ThreadCell)(self, spec, parent)
        self.register(cell)
        return cell

    def register(self, cell: Cell) -> None:
        with self._lock:
            if cell.name in self._cells:
                raise NameTakenError(cell.name)
            self._cells[cell.name] = cell

    def unregister(self, cell: Cell) -> None:
        with self._lock:
            if self._cells.get(cell.name) is cell:
                del self._cells[cell.name]

    def process_host(self) -> BaseContext:
        """The multiprocessing context process actors start from."""
        with self._lock:
            if self._context is None:
                self._context = multiprocessing.get_context(self.start_method)
                if self.start_method == "forkserver":
                    self._context.set_forkserver_preload(["actors.process._child"])
                self._io = IOLoop(self.name)
            return self._context

    def schedule_write(self, channel: Channel) -> None:
        """Have the writer thread send what ``channel`` has queued."""
        assert self._io is not None
        self._io.writer.schedule(channel)

    def adopt_process(self, cell: ProcessCell, channel: Channel) -> None:
        with self._lock:
            self._processes = [c for c in self._processes if c.process.is_alive()]
            self._processes.append(channel)
        assert self._io is not None
        self._io.register(cell, channel)

    # -- internals --------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SpawnError("", f"actor system {self.name!r} is shut down")

    def _auto_name(self, factory: Any) -> str:
        base = getattr(factory, "__name__", type(factory).__name__)
        return f"{base}-{next(self._auto_names)}"

    def _end_processes(self, deadline: float) -> None:
        with self._lock:
            channels, self._processes = self._processes, []
        processes = [c.process for c in channels]
        survivors = [p for p in processes if p.is_alive()]
        for process in survivors:
            process.terminate()
        for process in survivors:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in survivors:
            if process.is_alive():
                process.kill()
                process.join(1.0)
        for channel in channels:
            channel.kill_group()

    def __repr__(self) -> str:
        return f"<ActorSystem {self.name!r} ({len(self._cells)} actors)>"


def _descendants(processes: list[Any]) -> list[psutil.Process]:
    found: list[psutil.Process] = []
    for process in processes:
        try:
            found.extend(psutil.Process(process.pid).children(recursive=True))
        except (psutil.NoSuchProcess, ValueError, TypeError):
            continue
    return found
