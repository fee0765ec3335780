"""The lease log: a replayable, offset-addressed view of one consumer's share of a group.

A Spark query reads a balanced group through a `LeaseLog` keyed by (topic, group,
consumer). The log is one member of the group. Messages it pulls get consecutive
offsets and stay *leased* to the consumer until acked, so any range that is not acked
yet is served identically however often it is fetched (task retries, replays after a
failure, a restart from the checkpoint).

Invariants:
- offsets are never reused; ``position`` (the first unacked offset) only grows;
- ``ack(n)`` is cumulative: every held record below ``n`` is acked, nothing else;
- every call from the consumer is a heartbeat; ``lease_seconds`` without one releases
  every held record back to the group (nack ``"lease expired"``: redelivered with
  ``attempt + 1`` while the topic's attempts remain) and leaves the group, so the
  messages reach another member. Offsets of released records then hold nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from runtime._lease_record import LeasedDelivery, LeaseRecord, PayloadError, record_of

__all__ = ["LeaseLog", "LeaseSource"]

logger = logging.getLogger(__name__)

DEFAULT_FILL_LIMIT = 100_000
DEFAULT_LINGER = 0.02
EXPIRED_REASON = "lease expired"


class LeaseSource(Protocol):
    """The group membership a lease log pulls from (a `PullSubscription`)."""

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[LeasedDelivery]: ...

    def unsubscribe(self) -> None: ...


class LeaseLog:
    """Leases of one (topic, group, consumer); thread-safe.

    Args:
        subscribe: joins the group; called lazily, again after a release.
        reject: settles a delivery whose message cannot be encoded (dead letter,
            reason ``error``) with the error text.
        lease_seconds: how long leases live without a heartbeat.
        fill_limit: most records pulled by one `latest` call without a row limit.
        linger: how long a fill waits for the group's next message before it stops.
        clock: the time source of lease deadlines.
    """

    def __init__(
        self,
        *,
        subscribe: Callable[[], LeaseSource],
        reject: Callable[[LeasedDelivery, str], None],
        lease_seconds: float,
        fill_limit: int = DEFAULT_FILL_LIMIT,
        linger: float = DEFAULT_LINGER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds!r}")
        self._subscribe = subscribe
        self._reject = reject
        self._lease_seconds = lease_seconds
        self._fill_limit = fill_limit
        self._linger = linger
        self._clock = clock
        self._lock = threading.Lock()
        self._source: LeaseSource | None = None
        self._base = 0  # offset of _held[0]; everything below is acked or released
        self._held: list[tuple[LeaseRecord, LeasedDelivery]] = []
        self._deadline = clock() + lease_seconds

    @property
    def end(self) -> int:
        """One past the last offset assigned so far."""
        with self._lock:
            return self._base + len(self._held)

    def position(self) -> int:
        """The first offset not acked yet (where a fresh query starts); a heartbeat."""
        with self._lock:
            self._beat()
            return self._base

    def heartbeat(self) -> None:
        """Extend every lease by ``lease_seconds`` from now."""
        with self._lock:
            self._beat()

    def latest(self, start: int, max_rows: int | None) -> int:
        """Lease up to ``max_rows`` records from ``start`` on; return the end offset.

        Pulls from the group without blocking: the end is below ``start + max_rows``
        when the group has fewer messages waiting. A heartbeat.
        """
        with self._lock:
            self._beat()
            if start > self._base + len(self._held):
                self._jump_to(start)
            want = start + (max_rows if max_rows is not None else self._fill_limit)
            self._fill(want)
            return max(start, min(want, self._base + len(self._held)))

    def fetch(self, start: int, end: int) -> list[LeaseRecord]:
        """The held records of offsets ``[start, end)``: the same on every call. A heartbeat."""
        with self._lock:
            self._beat()
            first = max(start - self._base, 0)
            last = max(min(end - self._base, len(self._held)), first)
            return [record for record, _ in self._held[first:last]]

    def ack(self, offset: int) -> int:
        """Ack every held record below ``offset`` (cumulative); return the position."""
        with self._lock:
            self._beat()
            count = min(max(offset - self._base, 0), len(self._held))
            done, self._held = self._held[:count], self._held[count:]
            self._base += count
        for _, delivery in done:
            _settle(delivery.ack)
        return self._base

    def expire(self) -> int:
        """Release everything when the lease ran out; return how many records went back."""
        with self._lock:
            if self._clock() < self._deadline or (self._source is None and not self._held):
                return 0
            released = self._release()
        if released:
            logger.info("lease expired: %d messages go back to the group", released)
        return released

    def close(self) -> int:
        """Release every held record to the group and leave it; return the count."""
        with self._lock:
            return self._release()

    def _beat(self) -> None:
        self._deadline = self._clock() + self._lease_seconds

    def _jump_to(self, start: int) -> None:
        # The consumer's checkpoint is ahead of this log (e.g. the broker restarted): a
        # cumulative ack up to ``start`` would ack records it never read, so return them.
        self._release()
        self._base = start

    def _fill(self, want: int) -> None:
        if self._source is None:
            self._source = self._subscribe()
        while (missing := want - self._base - len(self._held)) > 0:
            try:  # the group refills a member's prefetch asynchronously: linger briefly
                deliveries = self._source.receive_many(missing, timeout=self._linger)
            except TimeoutError:
                return
            for delivery in deliveries:
                try:
                    self._held.append((record_of(delivery), delivery))
                except PayloadError as exc:
                    self._reject(delivery, str(exc))

    def _release(self) -> int:
        source, self._source = self._source, None
        held, self._held = self._held, []
        self._base += len(held)
        # Leave the group first, so the returned messages cannot come back to us.
        if source is not None:
            _settle(source.unsubscribe)
        for _, delivery in held:
            _settle(lambda d=delivery: d.nack(EXPIRED_REASON))  # type: ignore[misc]
        return len(held)


def _settle(action: Callable[[], None]) -> None:
    # A delivery may have settled on its own meanwhile (ack deadline, topic closed).
    try:
        action()
    except Exception as exc:  # settled meanwhile, or its topic is gone: nothing to undo
        logger.debug("lease settlement skipped: %s", exc)
