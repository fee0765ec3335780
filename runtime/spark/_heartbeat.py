"""Keeps a consumer's leases alive while a long micro-batch runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Heartbeat"]

logger = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``beat`` every ``interval`` seconds in a thread, until `stop`.

    The stream reader that starts it owns it and stops it in ``stop()``; when Spark's
    runner process dies instead, the thread dies with it and the leases expire, which
    is the point.
    """

    def __init__(self, beat: Callable[[], None], interval: float, name: str) -> None:
        self._beat = beat
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating and wait for the thread (at most ``timeout`` seconds)."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._beat()
            except Exception as exc:  # broker away for a moment: try again next beat
                logger.warning("actorbus: lease heartbeat failed: %s", exc)
