"""Pool: a supervised set of identical actors behind one router."""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal

from actors._spec import ChildSpec, SupervisorSpec
from actors.errors import WorkerCrashedError

if TYPE_CHECKING:
    from actors._cell import Cell
    from actors._kernel import Kernel
    from actors._ref import Ref

__all__ = ["Pool", "Router"]

Router = Literal["least_busy", "round_robin", "key_hash"]
_ROUTERS = ("least_busy", "round_robin", "key_hash")


def stable_hash(key: Any) -> int:
    """A hash that is the same in every process (``hash(str)`` is salted per process)."""
    if isinstance(key, str):
        return zlib.crc32(key.encode())
    if isinstance(key, bytes):
        return zlib.crc32(key)
    if isinstance(key, int):
        return key & 0x7FFFFFFF
    return zlib.crc32(repr(key).encode())


class Pool:
    """Identical members under a one_for_one supervisor; a crashed member is replaced.

    Routers: ``"least_busy"`` (fewest messages in flight), ``"round_robin"`` (strict
    rotation), ``"key_hash"`` (same key, same member while membership is stable). With
    any router, a message sent with a ``key`` goes to the key's member, so per-key
    order holds.
    """

    def __init__(self, kernel: Kernel, root: Ref, factory: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], *, size: int, process: bool, router: Router,
                 name: str, stuck_after: float | None = None) -> None:
        if router not in _ROUTERS:
            raise ValueError(f"router must be one of {_ROUTERS}, got {router!r}")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size must be an int >= 1, got {size!r}")
        self.name = name
        self.router = router
        self._kernel = kernel
        self._factory, self._args, self._kwargs, self._process = factory, args, kwargs, process
        self._stuck_after = stuck_after
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._rotation = itertools.count()
        spec = SupervisorSpec(children=(), max_restarts=max(20, 10 * size), within=5.0)
        self._supervisor = kernel.start_child(root, ChildSpec(id=name, factory=spec)).ref
        self._members: tuple[Cell, ...] = ()
        try:
            self._grow(size)
        except BaseException:
            self._supervisor.stop()  # a failed start leaves nothing running
            raise

    @property
    def size(self) -> int:
        """How many members the pool has."""
        return len(self._members)

    def members(self) -> list[Ref]:
        """The members' Refs (stable across member restarts)."""
        return [cell.ref for cell in self._members]

    def tell(self, message: Any, *, key: Any = None) -> None:
        """Send to one member chosen by the router (or by ``key``). Never blocks."""
        self._pick(key).tell(message)

    def ask(self, message: Any, *, key: Any = None, timeout: float | None = 5.0) -> Future[Any]:
        """Ask one member chosen by the router (or by ``key``); see `Ref.ask`.

        If a process member dies while the ask waits behind the message it was running,
        the ask goes to another member (a keyed one to the same member's next process,
        keeping the key's order) within what is left of ``timeout``; only the message the
        member was running fails, with `WorkerCrashedError`.
        """
        cell = self._pick(key)
        if not self._process:
            return cell.ask(message, timeout)
        answer: Future[Any] = Future()
        deadline = None if timeout is None else time.monotonic() + timeout
        self._forward(cell.ask(message, timeout), answer, message, key, cell, deadline)
        return answer

    def _forward(self, asked: Future[Any], answer: Future[Any], message: Any, key: Any,
                 cell: Cell, deadline: float | None) -> None:
        """Resolve ``answer`` from ``asked``, or ask again if its member never took it."""
        def done(future: Future[Any]) -> None:
            error = future.exception()
            if isinstance(error, WorkerCrashedError) and not error.started:
                try:
                    self._reroute(answer, message, key, cell, deadline)
                    return
                except Exception as exc:  # e.g. the pool stopped meanwhile
                    error = exc
            if answer.set_running_or_notify_cancel():
                if error is None:
                    answer.set_result(future.result())
                else:
                    answer.set_exception(error)

        asked.add_done_callback(done)

    def _reroute(self, answer: Future[Any], message: Any, key: Any, crashed: Cell,
                 deadline: float | None) -> None:
        members = self._members
        others = [m for m in members if m is not crashed]
        if key is not None or not others:
            cell = crashed if crashed in members or not members else self._pick(key)
        else:
            cell = _least_busy(tuple(others), next(self._rotation))
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        self._forward(cell.ask(message, timeout), answer, message, key, cell, deadline)

    def resize(self, size: int) -> None:
        """Grow or shrink to ``size`` members; returns once new members run.

        Removed members stop after the mail they already have, so asks in flight to
        them still complete.
        """
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size must be an int >= 1, got {size!r}")
        with self._lock:
            extra = size - len(self._members)
            removed = self._members[size:] if extra < 0 else ()
            self._members = self._members[:size]
        for cell in reversed(removed):
            cell.ref.stop()
        if extra > 0:
            self._grow(extra)

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop every member and the pool's supervisor."""
        self._supervisor.stop(timeout=timeout)

    def _grow(self, count: int) -> None:
        """Start ``count`` members; if one fails, stop those this call started, then raise."""
        started: list[Cell] = []
        try:
            for _ in range(count):
                spec = ChildSpec(id=f"{self.name}-{next(self._ids)}", factory=self._factory,
                                 args=self._args, kwargs=self._kwargs, process=self._process,
                                 stuck_after=self._stuck_after)
                started.append(self._kernel.start_child(self._supervisor, spec))
        except BaseException:
            for cell in reversed(started):
                cell.ref.stop()
            raise
        with self._lock:
            self._members = (*self._members, *started)

    def _pick(self, key: Any) -> Cell:
        members = self._members
        if not members:
            raise RuntimeError(f"pool {self.name!r} is stopped")
        if key is not None:
            return members[stable_hash(key) % len(members)]
        start = next(self._rotation)
        if self.router != "least_busy":
            return members[start % len(members)]
        return _least_busy(members, start)


def _least_busy(members: tuple[Cell, ...], start: int) -> Cell:
    """The member with the fewest messages in flight; ties rotate."""
    count = len(members)
    best = members[start % count]
    best_load = best.in_flight()
    for offset in range(1, count):
        if best_load == 0:
            break
        candidate = members[(start + offset) % count]
        load = candidate.in_flight()
        if load < best_load:
            best, best_load = candidate, load
    return best
