"""The one scheduler of a Publisher: a thread that wakes its actor at batch deadlines.

There is no timer per batch. The actor asks for a tick at its earliest deadline; the
ticker keeps only the earliest request and, once the clock passes it, calls ``tick``
(which tells the actor). The actor then closes what is due and asks for the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Ticker"]

log = logging.getLogger(__name__)

# Upper bound of one wait, so a ticker with an injected clock keeps re-reading it.
_MAX_WAIT = 0.25


class Ticker:
    """A thread that calls ``tick`` once the clock reaches the earliest scheduled deadline.

    Args:
        tick: called from the ticker's thread, without locks held; must not block.
        clock: the time source deadlines are read against.
        name: the thread's name.
    """

    def __init__(
        self,
        tick: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str = "publisher-ticker",
    ) -> None:
        self._tick = tick
        self._clock = clock
        self._condition = threading.Condition(threading.Lock())
        self._deadline: float | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def schedule(self, deadline: float) -> None:
        """Ask for a tick at ``deadline`` (a clock reading); the earliest request wins."""
        with self._condition:
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
                self._condition.notify()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for it to end."""
        with self._condition:
            self._stopped = True
            self._condition.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        """Until stopped: wait for the deadline to pass, consume it, call ``tick``."""
        condition = self._condition
        while True:
            with condition:
                while True:
                    if self._stopped:
                        return
                    if self._deadline is None:
                        condition.wait(_MAX_WAIT)
                        continue
                    remaining = self._deadline - self._clock()
                    if remaining <= 0:
                        self._deadline = None
                        break
                    condition.wait(min(remaining, _MAX_WAIT))
            try:
                self._tick()
            except Exception:
                log.exception("publisher tick failed")
