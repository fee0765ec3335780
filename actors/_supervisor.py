"""The supervisor actor: starts children, restarts them by strategy, escalates past its limit."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from actors._actor import Actor
from actors._cell import Cell, ChildExited, ChildFailed, ChildFinished, StopChild
from actors._spec import SupervisorSpec
from actors.errors import RestartLimitError, SpawnError

__all__ = ["AddChild", "ShutdownChildren", "Supervisor"]

logger = logging.getLogger(__name__)

_DEFAULT_BUDGET = (SupervisorSpec(children=()).max_restarts, SupervisorSpec(children=()).within)


@dataclass(frozen=True, slots=True)
class AddChild:
    """Ask a supervisor to adopt and start one more child (does not wait for it to run)."""

    cell: Cell


@dataclass(frozen=True, slots=True)
class ShutdownChildren:
    """Ask a supervisor to stop every child for good, in reverse start order, by ``deadline``."""

    deadline: float


@dataclass(frozen=True, slots=True)
class _RestartDue:
    cells: tuple[Cell, ...]


class Supervisor(Actor):
    """Supervises its children with OTP semantics.

    The supervisor never waits for a child to start (a child's ``on_start`` may itself
    ask a supervisor for something); ``spawn``/``supervise`` callers wait on the cell.
    Child cells live on the supervisor's own cell, so a restarted supervisor restarts
    the same children behind the same Refs.
    """

    def __init__(self, spec: SupervisorSpec, *, root: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.spec = spec
        self.root = root
        self._clock = clock
        self._restarts: deque[float] = deque()
        self._budgets: dict[Cell, deque[float]] = {}  # the root's: one per top-level child
        self._streak: dict[Cell, tuple[int, float]] = {}

    @property
    def _own(self) -> Cell:
        """This supervisor's cell (a supervisor always runs in a cell of its system)."""
        return cast("Cell", self._actorbus_cell)

    @property
    def children(self) -> list[Cell]:
        return self._own.children

    def on_start(self) -> None:
        own = self._own
        if not own.children:
            own.children.extend(own.system.make_cell(child, self.ref) for child in self.spec.children)
        for cell in self.children:
            if not cell.dead and not cell.incarnation_active():
                self._start(cell)
        deadline = time.monotonic() + 60.0
        for cell in self.children:
            cell.started.wait(max(0.0, deadline - time.monotonic()))
            if cell.start_error is not None and cell.incarnations <= 1:
                raise SpawnError(cell.name, f"child failed to start: {cell.start_error!r}")

    def on_stop(self) -> None:
        for cell in reversed(self.children):
            if not cell.stop_incarnation(cell.spec.shutdown):
                logger.warning("child %s did not stop within %ss", cell.name, cell.spec.shutdown)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ChildFailed):
            return self._on_failed(message)
        if isinstance(message, ChildExited):
            return self._on_exited(message.cell)
        if isinstance(message, StopChild):
            return self._on_stop_child(message.cell)
        if isinstance(message, ChildFinished):
            if message.cell in self.children:
                self.children.remove(message.cell)
            return None
        if isinstance(message, _RestartDue):
            return self._restart(message.cells)
        if isinstance(message, AddChild):
            self.children.append(message.cell)
            return self._start(message.cell)
        if isinstance(message, ShutdownChildren):
            return self._shutdown(message.deadline)
        raise TypeError(f"supervisor {self.ref.name!r} got an unknown message: {message!r}")

    # -- children ----------------------------------------------------------------------------
    def _start(self, cell: Cell) -> None:
        try:
            cell.start_incarnation()
        except Exception as exc:
            error = exc if isinstance(exc, SpawnError) else SpawnError(cell.name, repr(exc))
            cell.failed(error, start=True)

    def _on_stop_child(self, cell: Cell) -> None:
        cell.stop_requested = True
        if cell.incarnation_active():
            cell.request_stop()
        else:
            cell.finish("stopped")

    def _shutdown(self, deadline: float) -> None:
        for cell in reversed(list(self.children)):
            cell.stop_requested = True
            budget = max(0.0, min(cell.spec.shutdown, deadline - time.monotonic()))
            if cell.incarnation_active():
                cell.request_stop()
                if not cell.finished.wait(budget):
                    logger.warning("child %s did not stop in time; dropping it", cell.name)
            cell.finish("stopped")
        self.children.clear()

    # -- failures ------------------------------------------------------------------------------
    def _on_exited(self, cell: Cell) -> None:
        if cell not in self.children:
            return
        if cell.stop_requested or cell.spec.restart != "permanent":
            cell.finish("stopped")
            return
        self._handle(cell, restarted=False)

    def _on_failed(self, message: ChildFailed) -> None:
        cell = message.cell
        if cell not in self.children or cell.dead:
            return
        first_start = cell.start_error is message.error and cell.incarnations <= 1
        if cell.stop_requested or first_start or cell.spec.restart == "temporary":
            if message.restarted:
                cell.stop_incarnation(cell.spec.shutdown)
            cell.finish("stopped")
            return
        if self.root and isinstance(message.error, RestartLimitError):
            self._drop(cell, message.error)  # a top-level tree gave up: it goes, alone
            return
        self._handle(cell, restarted=message.restarted)

    def _handle(self, cell: Cell, *, restarted: bool) -> None:
        if self.root:
            max_restarts, within = _budget_of(cell)
            if not _within(self._budgets.setdefault(cell, deque()), self._clock(),
                           max_restarts, within):
                self._drop(cell, RestartLimitError(cell.name, max_restarts, within))
                return
        elif not _within(self._restarts, self._clock(), self.spec.max_restarts, self.spec.within):
            self._give_up()
            return
        targets = self._targets(cell)
        for other in reversed(targets):
            if other is not cell:
                other.stop_incarnation(other.spec.shutdown)
        if restarted:  # a process actor already restarted in place (its cell counted it)
            targets = tuple(c for c in targets if c is not cell)
        delay = self._backoff(cell)
        if delay > 0:
            self._own.system.scheduler.call_later(
                delay, lambda: self.ref.tell(_RestartDue(targets))
            )
        else:
            self._restart(targets)

    def _targets(self, cell: Cell) -> tuple[Cell, ...]:
        if self.spec.strategy == "one_for_all":
            return tuple(self.children)
        if self.spec.strategy == "rest_for_one":
            return tuple(self.children[self.children.index(cell):])
        return (cell,)

    def _restart(self, cells: tuple[Cell, ...]) -> None:
        for cell in cells:
            if cell.dead or cell not in self.children:
                continue
            if cell.stop_requested:
                cell.finish("stopped")
                continue
            if cell.incarnation_active():
                continue
            if cell.spec.restart == "temporary":  # a sibling stopped with the others: removed
                cell.finish("stopped")
                continue
            cell.restarts += 1
            self._start(cell)

    def _backoff(self, cell: Cell) -> float:
        now = self._clock()
        count, last = self._streak.get(cell, (0, now))
        count = 1 if now - last > self.spec.within else count + 1
        self._streak[cell] = (count, now)
        return self.spec.backoff.delay(count) if self.spec.backoff else 0.0

    def _give_up(self) -> None:
        """Stop every child (reverse order), then fail: the parent decides what follows."""
        self.on_stop()
        self._restarts.clear()
        raise RestartLimitError(self.ref.name, self.spec.max_restarts, self.spec.within)

    def _drop(self, cell: Cell, error: RestartLimitError) -> None:
        """The root's answer to a top-level child past its budget: stop it alone, report it.

        The root itself never gives up; unrelated top-level actors keep running.
        """
        self._budgets.pop(cell, None)
        self._streak.pop(cell, None)
        cell.emit("escalated", error)
        if not cell.stop_incarnation(cell.spec.shutdown):
            logger.warning("child %s did not stop within %ss", cell.name, cell.spec.shutdown)
        cell.finish("stopped")
        if cell in self.children:
            self.children.remove(cell)


def _budget_of(cell: Cell) -> tuple[int, float]:
    """A top-level child's restart budget: its tree's own, or `SupervisorSpec`'s defaults."""
    factory = cell.spec.factory
    if isinstance(factory, SupervisorSpec):
        return factory.max_restarts, factory.within
    return _DEFAULT_BUDGET


def _within(window: deque[float], now: float, max_restarts: int, within: float) -> bool:
    """Count one more restart at ``now``; True while no more than ``max_restarts`` in ``within``."""
    while window and now - window[0] > within:
        window.popleft()
    window.append(now)
    return len(window) <= max_restarts
