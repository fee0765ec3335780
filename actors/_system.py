"""ActorSystem: names, the root supervisor, process plumbing and an orderly shutdown."""

from __future__ import annotations

import functools
import itertools
import logging
import multiprocessing
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from actors._kernel import START_TIMEOUT, Kernel, kill_all
from actors._ref import Ref
from actors._spec import ChildSpec, SupervisorSpec
from actors._status import ActorStatus, ProcessMeter
from actors._supervisor import ShutdownChildren, Supervisor
from actors.errors import ActorNotFoundError

if TYPE_CHECKING:
    from actors._pool import Pool, Router

__all__ = ["ActorSystem"]

logger = logging.getLogger(__name__)


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
        self._kernel = Kernel(name, method)
        self.dead_letters = self._kernel.dead_letters
        self.events = self._kernel.events
        self._auto_names = itertools.count(1)
        self._meter = ProcessMeter()
        root = ChildSpec(id=name, factory=functools.partial(
            Supervisor, SupervisorSpec(children=()), root=True))
        self._root = self._kernel.make_cell(root, None)
        self._root.start_incarnation()
        self._root.started.wait(START_TIMEOUT)

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
        return self._kernel.start_child(self._root.ref, spec).ref

    def supervise(self, spec: SupervisorSpec, *, name: str | None = None) -> Ref:
        """Start a supervisor (under the root) and return once every child of it runs.

        When the tree gives up (more than its ``max_restarts`` within ``within``), the
        root stops it alone and emits ``"escalated"`` with its `RestartLimitError`.

        Raises:
            NameTakenError: the supervisor's name or a child's id is in use.
            SpawnError: a child could not be started.
        """
        child = ChildSpec(id=name or f"supervisor-{next(self._auto_names)}", factory=spec)
        return self._kernel.start_child(self._root.ref, child).ref

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

        return Pool(self._kernel, self._root.ref, factory, args, kwargs, size=size,
                    process=process, router=router,
                    name=name or f"pool-{next(self._auto_names)}", stuck_after=stuck_after)

    def lookup(self, name: str) -> Ref:
        """The Ref of the actor called ``name``.

        Raises:
            ActorNotFoundError: no such actor.
        """
        cell = self._kernel.cells.get(name)
        if cell is None:
            raise ActorNotFoundError(name)
        return cell.ref

    def status(self) -> dict[str, ActorStatus]:
        """A snapshot of every actor, keyed by name (psutil figures for process actors)."""
        with self._kernel.lock:
            cells = list(self._kernel.cells.values())
        return {cell.name: self._meter.status(cell) for cell in cells}

    def shutdown(self, *, timeout: float = 10.0) -> None:
        """Stop everything within ``timeout`` seconds in all; never hangs.

        Children stop in reverse start order (their queued mail first, as far as the
        budget allows); then any process still running gets SIGTERM, then SIGKILL, and
        its descendants are swept. Idempotent.
        """
        kernel = self._kernel
        with kernel.lock:
            if kernel.closed:
                return
            kernel.closed = True
        deadline = time.monotonic() + timeout
        descendants = kernel.descendants()
        try:
            self._root.ref.ask(ShutdownChildren(deadline - 0.25 * timeout), timeout=None).result(
                max(0.0, deadline - time.monotonic()))
        except Exception:
            logger.warning("system %s: children did not stop in time", self.name, exc_info=True)
        self._root.stop(max(0.0, deadline - time.monotonic()))
        kernel.end_processes(deadline)
        kill_all(descendants)  # whatever our process actors started, gone or not
        kernel.stop_threads(deadline)

    def _auto_name(self, factory: Any) -> str:
        base = getattr(factory, "__name__", type(factory).__name__)
        return f"{base}-{next(self._auto_names)}"

    def __repr__(self) -> str:
        return f"<ActorSystem {self.name!r} ({len(self._kernel.cells)} actors)>"

