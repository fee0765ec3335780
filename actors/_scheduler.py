"""One timer thread per system: ask deadlines and delayed restarts."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from .errors import AskTimeoutError

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)


class Scheduler:
    """Runs callbacks at deadlines on one daemon thread owned by an `ActorSystem`.

    Entries are never removed when they become moot (an ask answered in time): the
    heap is compacted instead when most of it is stale, so a hot ask loop costs one
    ``heappush`` per ask and memory stays bounded by the live entries.
    """

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], Any], Future[Any] | None]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self._compact_at = 1024
        self._thread = threading.Thread(target=self._run, name=f"{name}-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the scheduler thread after ``delay`` seconds."""
        self._push(self._clock() + delay, callback, None)

    def expire_ask(self, future: Future[Any], name: str, timeout: float) -> None:
        """Fail ``future`` with `AskTimeoutError` unless it is done within ``timeout``."""

        def expire() -> None:
            try:
                future.set_exception(AskTimeoutError(name, timeout))
            except InvalidStateError:
                pass

        self._push(self._clock() + timeout, expire, future)

    def _push(self, deadline: float, callback: Callable[[], Any], future: Future[Any] | None) -> None:
        with self._cond:
            if self._stopped:
                return
            heap = self._heap
            earliest = heap[0][0] if heap else None
            heapq.heappush(heap, (deadline, next(self._seq), callback, future))
            if len(heap) > self._compact_at:
                self._compact()
            if earliest is None or deadline < earliest:
                self._cond.notify()

    def _compact(self) -> None:
        live = [entry for entry in self._heap if entry[3] is None or not entry[3].done()]
        heapq.heapify(live)
        self._heap = live
        self._compact_at = max(1024, 2 * len(live))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = self._clock()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    wait = self._heap[0][0] - now if self._heap else None
                    self._cond.wait(wait)
                if self._stopped:
                    return
                _, _, callback, future = heapq.heappop(self._heap)
            if future is not None and future.done():
                continue
            try:
                callback()
            except Exception:
                logger.exception("scheduled callback failed")

    def stop(self, timeout: float | None = 1.0) -> None:
        """Stop the thread; pending callbacks are dropped. Blocks up to ``timeout``."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
