"""The kernel behind an `ActorSystem`: names, cells, process plumbing.

`ActorSystem` is the public face; cells, supervisors and pools work through this
object (it implements `SystemContext`), so none of these hooks show in the system's API.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from typing import TYPE_CHECKING, Any

import psutil

from actors._cell import Cell
from actors._dead_letters import DeadLetters
from actors._events import Events
from actors._scheduler import Scheduler
from actors._supervisor import AddChild
from actors._thread_cell import ThreadCell
from actors.errors import NameTakenError, SpawnError
from actors.process._cell import ProcessCell
from actors.process._io import IOLoop

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from actors._ref import Ref
    from actors._spec import ChildSpec
    from actors.process._channel import Channel

__all__ = ["START_TIMEOUT", "Kernel", "kill_all"]

logger = logging.getLogger(__name__)

START_TIMEOUT = 60.0


class Kernel:
    """One system's registry of named cells, its threads, and its processes."""

    def __init__(self, name: str, start_method: str) -> None:
        self.name = name
        self.start_method = start_method
        self.dead_letters = DeadLetters()
        self.events = Events()
        self.scheduler = Scheduler(name)
        self.closed = False
        self.lock = threading.Lock()
        self.cells: dict[str, Cell] = {}
        self._context: BaseContext | None = None
        self._io: IOLoop | None = None
        self._processes: list[Channel] = []

    # -- cells ----------------------------------------------------------------------------
    def start_child(self, supervisor: Ref, spec: ChildSpec) -> Cell:
        """Have ``supervisor`` start ``spec`` and wait until it runs.

        Raises:
            NameTakenError: the id is in use.
            SpawnError: the system is shut down, or the child did not start.
        """
        if self.closed:
            raise SpawnError("", f"actor system {self.name!r} is shut down")
        cell = self.make_cell(spec, supervisor)
        try:
            supervisor.ask(AddChild(cell), timeout=None).result(START_TIMEOUT)
        except BaseException:
            cell.finish("stopped")
            raise
        return self.await_started(cell)

    def await_started(self, cell: Cell) -> Cell:
        """Wait for ``cell``'s first incarnation; raise `SpawnError` if it failed."""
        if not cell.started.wait(START_TIMEOUT):
            cell.ref.stop(timeout=1.0)
            raise SpawnError(cell.name, f"not running after {START_TIMEOUT}s")
        if cell.start_error is not None:
            error = cell.start_error
            if isinstance(error, SpawnError):
                raise error
            raise SpawnError(cell.name, repr(error)) from error
        return cell

    def make_cell(self, spec: ChildSpec, parent: Ref | None) -> Cell:
        """Create (and name-register) the cell for ``spec``; starts nothing."""
        cell: Cell = (ProcessCell if spec.process else ThreadCell)(self, spec, parent)
        self.register(cell)
        return cell

    def register(self, cell: Cell) -> None:
        with self.lock:
            if cell.name in self.cells:
                raise NameTakenError(cell.name)
            self.cells[cell.name] = cell

    def unregister(self, cell: Cell) -> None:
        with self.lock:
            if self.cells.get(cell.name) is cell:
                del self.cells[cell.name]

    # -- processes ----------------------------------------------------------------------------
    def process_host(self) -> BaseContext:
        """The multiprocessing context process actors start from."""
        with self.lock:
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
        with self.lock:
            self._processes = [c for c in self._processes if c.process.is_alive()]
            self._processes.append(channel)
        assert self._io is not None
        self._io.register(cell, channel)

    def descendants(self) -> list[psutil.Process]:
        """Every process our process actors started (and theirs), as of now."""
        with self.lock:
            processes = [c.process for c in self._processes]
        found: list[psutil.Process] = []
        for process in processes:
            try:
                found.extend(psutil.Process(process.pid).children(recursive=True))
            except (psutil.NoSuchProcess, ValueError, TypeError):
                continue
        return found

    def end_processes(self, deadline: float) -> None:
        """SIGTERM every process still running, SIGKILL it at ``deadline``; kill its group."""
        with self.lock:
            channels, self._processes = self._processes, []
        survivors = [c.process for c in channels if c.process.is_alive()]
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

    def stop_threads(self, deadline: float) -> None:
        if self._io is not None:
            self._io.stop(max(0.1, deadline - time.monotonic()))
        self.scheduler.stop(max(0.1, deadline - time.monotonic()))


def kill_all(processes: list[Any]) -> None:
    """SIGKILL each psutil process that is still there."""
    for proc in processes:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
