"""One timer thread per Bus: calls back at scheduled times (it wakes trackers)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Timer"]

logger = logging.getLogger(__name__)

# An idle timer re-checks its state this often; nothing depends on the value.
_IDLE_WAIT = 60.0


class Timer:
    """Runs callbacks at ``clock()`` times on one thread, started on first use.

    Callbacks must be quick and must not block (they tell an actor). The owner stops
    the thread with `stop`.

    Args:
        clock: the time source the scheduled times refer to.
        name: the thread's name.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, name: str = "timer") -> None:
        self._clock = clock
        self._name = name
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(self, when: float, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once ``clock()`` reaches ``when``. Never blocks long."""
        with self._changed:
            if self._stopped:
                return
            heapq.heappush(self._heap, (when, next(self._order), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._heap[0][0] == when:
                self._changed.notify()

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once, ``delay`` seconds of ``clock()`` from now."""
        self.schedule(self._clock() + delay, callback)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Drop what is scheduled and stop the thread (waits up to ``timeout``)."""
        with self._changed:
            self._stopped = True
            self._heap.clear()
            self._changed.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                callback = self._next_due()
                if callback is None:
                    return
            try:
                callback()
            except Exception:
                logger.exception("timer callback failed")

    def _next_due(self) -> Callable[[], None] | None:
        """Wait (lock held) for the next due callback; None once stopped."""
        while not self._stopped:
            if not self._heap:
                self._changed.wait(_IDLE_WAIT)
                continue
            delay = self._heap[0][0] - self._clock()
            if delay <= 0:
                return heapq.heappop(self._heap)[2]
            self._changed.wait(min(delay, _IDLE_WAIT))
        return None
