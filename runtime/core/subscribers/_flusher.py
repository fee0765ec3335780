"""Sends a running batch's settlements while its handler still works through it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from runtime.core.settlement._delivery import HandOver

__all__ = ["FLUSH_AFTER", "CallLater", "Flusher"]

# Seconds a thread subscriber's settlements wait, at most, in its batch's buffer: they
# leave together at the batch's end, or on the next tick while the batch runs. Shorter
# sends settlements sooner and wakes the timer thread more often while a member is busy.
FLUSH_AFTER = 0.005

# ``call_later(delay, callback)``: calls ``callback()`` once, ``delay`` seconds from now.
CallLater = Callable[[float, Callable[[], None]], None]


class Flusher:
    """One subscriber's ticker: while a batch runs, its buffered settlements are sent
    every `FLUSH_AFTER` (one timer entry per subscriber, armed while batches run), so a
    handler that hangs holds back no earlier settlement.

    Args:
        call_later: the bus's timer.
    """

    def __init__(self, call_later: CallLater) -> None:
        self._call_later = call_later
        self._lock = threading.Lock()
        self._running: HandOver | None = None
        self._armed = False

    def opened(self, handover: HandOver) -> None:
        """``handover``'s batch starts on the subscriber's thread."""
        with self._lock:
            self._running = handover
            if self._armed:
                return
            self._armed = True
        self._call_later(FLUSH_AFTER, self._tick)

    def closed(self) -> None:
        """The batch ended (its owner sends what is left in its buffer)."""
        with self._lock:
            self._running = None

    def _tick(self) -> None:
        with self._lock:
            running = self._running
            if running is None:
                self._armed = False
                return
        running.flush_buffer()
        self._call_later(FLUSH_AFTER, self._tick)
