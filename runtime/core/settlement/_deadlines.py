"""Ack deadlines of one topic's hand-overs, and when the timer must next wake the tracker."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from runtime.core.settlement._delivery import HandOver

__all__ = ["Deadlines"]

# A hand-over is renewed once less than this share of its ack timeout is left.
_RENEW_SHARE = 0.75


class Deadlines:
    """Hand-over deadlines, oldest first. Not thread-safe: the ledger's lock guards it.

    Deadlines are registered with a monotonic clock and one fixed timeout, so they only
    grow: a FIFO is a priority queue here. A hand-over settled early stays in the FIFO
    until it reaches the head; the ledger's ``live`` map tells which ones still count.
    A renewed hand-over gets a second, later entry; its first one is skipped at the head
    because ``handover.deadline`` no longer matches it.

    Args:
        ack_timeout: seconds from hand-over to deadline (None: hand-overs have none).
        clock: the time source.
    """

    def __init__(self, ack_timeout: float | None, clock: Callable[[], float] = time.monotonic,
                 ) -> None:
        self._ack_timeout = ack_timeout
        self._clock = clock
        self._queue: deque[tuple[float, int]] = deque()
        self._wake_at: float | None = None

    def add(self, handover: HandOver) -> float | None:
        """Give ``handover`` (registered, with its id) its deadline.

        Returns when the timer must wake the tracker, if it is not armed already.
        """
        if self._ack_timeout is None:
            return None
        when = self._set(handover, self._ack_timeout)
        if self._wake_at is not None:
            return None
        self._wake_at = when
        return when

    def due(self, handover: HandOver) -> bool:
        """True when a quarter of ``handover``'s deadline has run (time to renew it): its
        ``renew_at`` passed, which a handler's loop may read itself."""
        return self._ack_timeout is not None and self._clock() > handover.renew_at

    def extend(self, handover: HandOver) -> None:
        """Move ``handover``'s deadline to ``ack_timeout`` from now (the timer stays armed
        for its earlier entry, which comes first)."""
        if self._ack_timeout is not None:
            self._set(handover, self._ack_timeout)

    def _set(self, handover: HandOver, timeout: float) -> float:
        """Queue ``handover``'s deadline, ``timeout`` from now, and its renewal time."""
        handover.deadline = when = self._clock() + timeout
        handover.renew_at = when - _RENEW_SHARE * timeout
        self._queue.append((when, handover.id))
        return when

    def pop_expired(self, live: dict[int, HandOver]) -> list[HandOver]:
        """Remove and return the live hand-overs whose deadline passed (the timer fired).

        Settled hand-overs met on the way are dropped. Call `rearm` afterwards.
        """
        self._wake_at = None
        now, queue, expired = self._clock(), self._queue, []
        while queue:
            when, hid = queue[0]
            handover = live.get(hid)
            if handover is not None and when > now:
                break
            queue.popleft()
            if handover is not None and handover.deadline <= when:  # else renewed since
                expired.append(handover)
        return expired

    def rearm(self) -> float | None:
        """When the timer must next wake the tracker (None: nothing is waiting)."""
        self._wake_at = self._queue[0][0] if self._queue else None
        return self._wake_at
