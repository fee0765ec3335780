"""One timer thread per system: ask deadlines and delayed restarts."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from actors.errors import AskTimeoutError

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)

_Ask = tuple[float, "Future[Any]", str]


class Scheduler:
    """Runs callbacks at deadlines on one daemon thread owned by an `ActorSystem`.

    Ask deadlines are kept in one deque per timeout value: asks with the same timeout
    expire in the order they were made, so registering one is an append (no heap, no
    closure), and answered asks are dropped when the thread reaches them. A deque that
    grows past twice its live size is compacted, so memory follows the live asks.
    """

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], Any]]] = []
        self._asks: dict[float, deque[_Ask]] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._next_wake = float("inf")
        self._stopped = False
        self._compact_at = 4096
        self._thread = threading.Thread(target=self._run, name=f"{name}-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the scheduler thread after ``delay`` seconds."""
        deadline = self._clock() + delay
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (deadline, next(self._seq), callback))
            if deadline < self._next_wake:
                self._cond.notify()

    def expire_ask(self, future: Future[Any], name: str, timeout: float) -> None:
        """Fail ``future`` with `AskTimeoutError` unless it is done within ``timeout``."""
        deadline = self._clock() + timeout
        with self._cond:
            pending = self._asks.get(timeout)
            if pending is None:
                pending = self._asks[timeout] = deque()
            pending.append((deadline, future, name))
            if len(pending) > self._compact_at:
                self._compact(timeout, pending)
            if deadline < self._next_wake:
                self._cond.notify()

    def _compact(self, timeout: float, pending: deque[_Ask]) -> None:
        live = deque(entry for entry in pending if not entry[1].done())
        self._asks[timeout] = live
        self._compact_at = max(4096, 2 * len(live))

    def _due(self, now: float) -> list[Callable[[], Any]]:
        """Pop what is due (lock held); set the next wake-up time."""
        due: list[Callable[[], Any]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap)[2])
        wake = heap[0][0] if heap else float("inf")
        for timeout, pending in self._asks.items():
            while pending and (pending[0][0] <= now or pending[0][1].done()):
                deadline, future, name = pending.popleft()
                if deadline <= now and not future.done():
                    due.append(_expiry(future, name, timeout))
            if pending:
                wake = min(wake, pending[0][0])
        self._next_wake = wake
        return due

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = self._clock()
                    due = self._due(now)
                    if due:
                        break
                    wait = self._next_wake - now
                    self._cond.wait(None if wait == float("inf") else wait)
                if self._stopped:
                    return
            for callback in due:
                try:
                    callback()
                except Exception:
                    logger.exception("scheduled callback failed")

    def stop(self, timeout: float | None = 1.0) -> None:
        """Stop the thread; pending callbacks are dropped. Blocks up to ``timeout``."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._asks.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


def _expiry(future: Future[Any], name: str, timeout: float) -> Callable[[], None]:
    def expire() -> None:
        try:
            future.set_exception(AskTimeoutError(name, timeout))
        except InvalidStateError:
            pass

    return expire
