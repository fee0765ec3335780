"""Admission to a topic's books: ``max_pending`` slots, taken before a publish fans out."""

from __future__ import annotations

import threading
import time

from runtime.errors import TopicClosedError, WouldBlock

__all__ = ["Admission"]


class Admission:
    """The publishing side's ``max_pending`` slots; the `Ledger` it is part of owns the
    lock, the pending count and the closed flag (one lock guards them all).
    """

    _topic: str
    _changed: threading.Condition
    pending: int
    closed: bool

    def take_slot(self, max_pending: int, deadline: float | None) -> None:
        """Wait until fewer than ``max_pending`` messages are pending, then take a slot.

        Blocks until ``deadline`` (``time.monotonic()`` based; None: no bound).

        Raises:
            TopicClosedError: the topic closed (also while waiting).
            WouldBlock: the deadline passed first.
        """
        with self._changed:
            while not self.closed and self.pending >= max_pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WouldBlock(f"topic {self._topic!r} has {max_pending} pending messages")
                self._changed.wait(remaining)
            if self.closed:
                raise TopicClosedError(self._topic)
            self.pending += 1

    def take_slots(self, count: int, max_pending: int) -> int:
        """Wait until fewer than ``max_pending`` messages are pending, then take up to
        ``count`` slots (as many as are free); returns how many. No time bound.

        Raises:
            TopicClosedError: the topic closed (also while waiting).
        """
        with self._changed:
            while not self.closed and self.pending >= max_pending:
                self._changed.wait()
            if self.closed:
                raise TopicClosedError(self._topic)
            taken = min(count, max_pending - self.pending)
            self.pending += taken
            return taken

    def release_slots(self, count: int) -> None:
        """Give back slots taken by `take_slot` for messages that were not published."""
        with self._changed:
            self.pending -= count
            self._changed.notify_all()
