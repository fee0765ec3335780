"""Ack deadlines of one topic's hand-overs, and when the timer must next wake the tracker."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from runtime.core.settlement._delivery import HandOver

__all__ = ["Deadlines"]

# A hand-over is renewed once less than this share of its ack timeout is left.
_RENEW_SHARE = 0.75


class Deadlines:
    """Hand-over deadlines, oldest first. Not thread-safe: the ledger's lock guards it.

    Deadlines wait in a heap, soonest first. A hand-over settled early stays in it until
    it reaches the top; the ledger's ``live`` map tells which ones still count. A
    renewed hand-over gets a second entry; its first one is skipped at the top because
    ``handover.deadline`` no longer matches it. A hand-over to a worker process counts
    from when the worker started it (`HandOver.running_for`): one whose worker has not
    started it is not expired but given a new deadline.

    Args:
        ack_timeout: seconds from hand-over to deadline (None: hand-overs have none).
        clock: the time source.
    """

    def __init__(self, ack_timeout: float | None, clock: Callable[[], float] = time.monotonic,
                 ) -> None:
        self._ack_timeout = ack_timeout
        self._clock = clock
        self._queue: list[tuple[float, int]] = []
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
        heapq.heappush(self._queue, (when, handover.id))
        return when

    def pop_expired(self, live: dict[int, HandOver]) -> list[HandOver]:
        """Remove and return the live hand-overs whose deadline passed (the timer fired).

        Settled hand-overs met on the way are dropped. Call `rearm` afterwards.
        """
        self._wake_at = None
        now, queue, expired = self._clock(), self._queue, []
        timeout = self._ack_timeout or 0.0  # set: only then are deadlines queued
        postponed: list[tuple[HandOver, float]] = []
        while queue:
            when, hid = queue[0]
            handover = live.get(hid)
            if handover is not None and when > now:
                break
            heapq.heappop(queue)
            if handover is None or handover.deadline > when:  # settled, or renewed since
                continue
            ran = handover.running_for()
            if ran < timeout:  # its worker started it late, or has not yet
                postponed.append((handover, timeout - max(ran, 0.0)))
            else:
                expired.append(handover)
        for handover, left in postponed:  # after the loop: one entry each per call
            self._set(handover, left)
        return expired

    def rearm(self) -> float | None:
        """When the timer must next wake the tracker (None: nothing is waiting)."""
        self._wake_at = self._queue[0][0] if self._queue else None
        return self._wake_at
