"""Ack deadlines of one topic's hand-overs, and when the timer must next wake the tracker."""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial

from runtime.core.settlement._delivery import HandOver

__all__ = ["Deadlines"]

# A hand-over is renewed once less than this share of its ack timeout is left.
_RENEW_SHARE = 0.75


class Deadlines:
    """Hand-over deadlines, soonest first. Not thread-safe: the ledger's lock guards it.

    Deadlines set to the full ``ack_timeout`` from now only grow, so they wait in a
    FIFO; the few set to less (a worker process's hand-over, counted from when its
    worker started it) wait in a heap beside it. A hand-over settled early stays queued
    until it reaches the head; the ledger's ``live`` map tells which ones still count. A
    renewed hand-over gets a second entry; its first one is skipped at the head because
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
        self._queue: deque[tuple[float, int]] = deque()
        self._shorter: list[tuple[float, int]] = []  # a heap
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
        when = self._clock() + timeout
        handover.set_deadline(when, when - _RENEW_SHARE * timeout)
        if timeout == self._ack_timeout:
            self._queue.append((when, handover.id))
        else:
            heapq.heappush(self._shorter, (when, handover.id))
        return when

    def pop_expired(self, live: dict[int, HandOver]) -> list[HandOver]:
        """Remove and return the live hand-overs whose deadline passed (the timer fired).

        Settled hand-overs met on the way are dropped. Call `rearm` afterwards.
        """
        self._wake_at = None
        now = self._clock()
        due = self._pop_due(self._queue, self._queue.popleft, live, now)
        due.extend(self._pop_due(self._shorter, partial(heapq.heappop, self._shorter), live, now))
        timeout = self._ack_timeout or 0.0  # set: only then are deadlines queued
        expired = []
        for handover in due:
            ran = handover.running_for()
            if ran < timeout:  # its worker started it late, or has not yet
                self._set(handover, timeout - max(ran, 0.0))
            else:
                expired.append(handover)
        return expired

    @staticmethod
    def _pop_due(
        queue: Sequence[tuple[float, int]], pop: Callable[[], object],
        live: dict[int, HandOver], now: float,
    ) -> list[HandOver]:
        due = []
        while queue:
            when, hid = queue[0]
            handover = live.get(hid)
            if handover is not None and when > now:
                break
            pop()
            if handover is not None and handover.deadline <= when:  # else renewed since
                due.append(handover)
        return due

    def rearm(self) -> float | None:
        """When the timer must next wake the tracker (None: nothing is waiting)."""
        heads = [queue[0][0] for queue in (self._queue, self._shorter) if queue]
        self._wake_at = min(heads) if heads else None
        return self._wake_at
