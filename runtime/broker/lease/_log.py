"""The lease log: a replayable, offset-addressed view of one consumer's share of a group.

A Spark query reads a balanced group through a `LeaseLog` keyed by (topic, group,
consumer). The log is one member of the group. Messages it pulls get consecutive
offsets and stay *leased* to the consumer until acked, so any range that is not acked
yet is served identically however often it is fetched (task retries, replays after a
failure, a restart from the checkpoint).

Invariants:
- offsets are never reused; ``position`` (the first unacked offset) only grows;
- ``ack(n)`` is cumulative: every held record below ``n`` is acked, nothing else;
- the log reads whole hand-overs (`Tranche`, from a lease member): a record is columns
  taken from the hand-over's envelopes, and a hand-over acked whole settles with one
  claim and one message to the tracker, no per-message object. A hand-over the ack cuts,
  or one that failed meanwhile, is settled one delivery at a time (``ack_many``), in
  bulk, outside the log's lock and one ack at a time per log;
- what a hand-over brings past the batch asked for stays *spare*: no offset, not leased;
  a release gives it back to the group at the same attempt;
- every call from the consumer is a heartbeat; ``lease_seconds`` without one releases
  every held record back to the group and leaves it, so the messages reach another
  member. A record a fetch served (the consumer may have worked on it) is nacked
  ``"lease expired"``: redelivered with ``attempt + 1`` while the topic's attempts
  remain, else dead-lettered. A record no fetch served goes back at the attempt it
  had, like a spare: nobody read it, so no attempt is counted (with the default
  ``max_delivery_attempts=1`` it would be dead-lettered unread). Offsets of released
  records then hold nothing, and the log remembers them as *released* (their messages
  are back in the group);
- offsets below ``position`` that were not released were acked, and offsets the log
  never assigned (a broker restart, a checkpoint from elsewhere) are *missing*: a
  replay of them cannot return their messages (`missing` counts them);
- an ack never settles a record that `latest` did not hand out: a consumer's offset
  ahead of the log (a restarted broker) moves the log forward, acking nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from runtime.broker.lease._handover import (
    EXPIRED_REASON,
    LeaseSource,
    Piece,
    ack_each,
    hold,
    receive_pieces,
    release_held,
    settle_acked,
)
from runtime.broker.lease._ranges import cut, overlap
from runtime.broker.lease._record import LeaseColumns, LeasedDelivery, LeaseRecord
from runtime.core.settlement._delivery import Tranche

__all__ = ["EXPIRED_REASON", "LeaseLog", "LeaseSource", "ack_each"]

logger = logging.getLogger(__name__)

DEFAULT_FILL_LIMIT = 100_000
DEFAULT_LINGER = 0.02
# Released offset ranges remembered for `missing` (older ones count as missing).
_RELEASED_RANGES = 256


class LeaseLog:
    """Leases of one (topic, group, consumer); thread-safe.

    Args:
        subscribe: joins the group; called lazily, again after a release.
        reject: settles a delivery whose message cannot be encoded (dead letter,
            reason ``error``) with the error text.
        ack_many: acks deliveries in bulk; returns how many were settled meanwhile
            (deadline, close) and could not be acked (default: `ack_each`).
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
        ack_many: Callable[[Sequence[LeasedDelivery]], int] | None = None,
        fill_limit: int = DEFAULT_FILL_LIMIT,
        linger: float = DEFAULT_LINGER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds!r}")
        self._subscribe = subscribe
        self._reject = reject
        self._ack_many = ack_many or ack_each
        self._lease_seconds = lease_seconds
        self._fill_limit = fill_limit
        self._linger = linger
        self._clock = clock
        self._lock = threading.Lock()
        self._settling = threading.Lock()  # one bulk ack at a time (hand-over buffers)
        self._source: LeaseSource | None = None
        # Offset _base + i is row i of the columns, held by _owners[i] (a Tranche, at
        # message _indexes[i] of it; or a delivery). Everything below _base is acked or
        # released. A None owner was acked out of order (`ack_range`).
        self._base = 0
        self._columns = LeaseColumns([], [], [], [], [], [])
        self._owners: list[Any] = []
        self._indexes: list[int] = []
        self._spares: list[Piece] = []  # received past the batch asked for: no offsets
        # [start, end) ranges whose records went back to the group, oldest first.
        self._released: list[tuple[int, int]] = []
        # [start, end) ranges of held offsets a fetch served: sorted, disjoint, at or
        # above _base (what a release nacks; the rest goes back without an attempt).
        self._read: list[tuple[int, int]] = []
        self._deadline = clock() + lease_seconds

    @property
    def end(self) -> int:
        """One past the last offset assigned so far."""
        with self._lock:
            return self._base + len(self._owners)

    def position(self) -> int:
        """The first offset not acked yet (where a fresh query starts); a heartbeat."""
        with self._lock:
            self._beat()
            return self._base

    def renew(self, lease_seconds: float) -> None:
        """Take the consumer's current ``lease_seconds`` (a restarted query may change it)."""
        if lease_seconds > 0 and lease_seconds != self._lease_seconds:
            with self._lock:
                self._lease_seconds = lease_seconds
                self._beat()

    def heartbeat(self) -> None:
        """Extend every lease by ``lease_seconds`` from now, and the ack deadline of every
        delivery the consumer holds: a query still working on a batch keeps it."""
        with self._lock:
            self._beat()
            source = self._source
            owners = list({id(o): o for o in self._owners if o is not None}.values())
            owners += [owner for owner, _ in self._spares]
        if source is None or not owners:
            return
        tranches = [o for o in owners if type(o) is Tranche]
        if tranches:
            source.renew_handovers(tranches)  # type: ignore[attr-defined]
        deliveries = [o for o in owners if type(o) is not Tranche]
        if deliveries:
            source.extend(deliveries)

    def latest(self, start: int, max_rows: int | None) -> int:
        """Lease up to ``max_rows`` records from ``start`` on; return the end offset.

        Pulls from the group without blocking: the end is below ``start + max_rows``
        when the group has fewer messages waiting. A heartbeat.
        """
        with self._lock:
            self._beat()
            if start > self._base + len(self._owners):
                self._jump_to(start)
            want = start + (max_rows if max_rows is not None else self._fill_limit)
            self._fill(want)
            return max(start, min(want, self._base + len(self._owners)))

    def unread(self) -> int:
        """Messages the group handed this log's member that no lease holds yet."""
        with self._lock:
            spare = sum(1 if indexes is None else len(indexes) for _, indexes in self._spares)
            source = self._source
        return spare + (source._unread() if source is not None else 0)

    def advance(self, start: int) -> int:
        """Move an empty log forward to ``start`` (the consumer's checkpoint); return the end.

        Acks nothing. A heartbeat.
        """
        with self._lock:
            self._beat()
            if start > self._base + len(self._owners):
                self._jump_to(start)
            return self._base + len(self._owners)

    def missing(self, start: int, end: int) -> int:
        """How many offsets of ``[start, end)`` are neither held nor released to the group.

        Those offsets were acked before, or this log never assigned them: a replay of
        the range cannot return their messages.
        """
        with self._lock:
            held_end = self._base + len(self._owners)
            wanted = max(end - start, 0)
            covered = overlap(start, end, self._base, held_end)
            covered += sum(overlap(start, end, a, b) for a, b in self._released)
            return max(wanted - covered, 0)

    def fetch(self, start: int, end: int) -> list[LeaseRecord]:
        """The held records of offsets ``[start, end)``: the same on every call. A heartbeat."""
        columns, _ = self.fetch_bounded(start, end, None)
        return columns.records()

    def fetch_bounded(
        self, start: int, end: int, max_bytes: int | None,
    ) -> tuple[LeaseColumns, int]:
        """The held rows of ``[start, end)`` as columns, cut short after the row whose
        payload passes ``max_bytes`` in total (None: no bound); returns them and the
        offset they end at (``end`` when not cut). The same on every call. A heartbeat."""
        with self._lock:
            self._beat()
            first = max(start - self._base, 0)
            last = max(min(end - self._base, len(self._owners)), first)
            if max_bytes is not None:
                end_row = cut(self._columns.payload, first, last, max_bytes)
                if end_row < last:
                    last, end = end_row, self._base + end_row
            if last > first:
                self._mark_read(self._base + first, self._base + last)
            return self._columns.slice(first, last), end

    def ack(self, offset: int) -> tuple[int, int]:
        """Ack every held record below ``offset`` (cumulative).

        Returns the position and how many of those records could not be acked because
        their delivery had settled meanwhile (its ack deadline passed, or the topic
        closed): the topic redelivered or dead-lettered them.
        """
        late = 0
        with self._settling:
            with self._lock:
                self._beat()
                count = min(max(offset - self._base, 0), len(self._owners))
                owners, indexes = self._owners[:count], self._indexes[:count]
                self._drop_head(count)
                position = self._base
            if owners:
                late = settle_acked(owners, indexes, self._ack_many)
        if late:
            logger.warning("lease ack: %d of %d messages had settled before the ack "
                           "(ack deadline or close); the topic redelivered or dead-lettered "
                           "them", late, len(owners))
        return position, late

    def ack_range(self, start: int, end: int) -> int:
        """Ack the held records of ``[start, end)`` only (a batch read's task finished
        its range); returns how many had settled before the ack (see `ack`).

        The position moves up over every acked record at its head.
        """
        with self._settling:
            with self._lock:
                self._beat()
                first = max(start - self._base, 0)
                last = max(min(end - self._base, len(self._owners)), first)
                owners, indexes = self._owners[first:last], self._indexes[first:last]
                held = self._owners
                held[first:last] = [None] * (last - first)
                head = next((i for i, o in enumerate(held) if o is not None), len(held))
                self._drop_head(head)
            return settle_acked(owners, indexes, self._ack_many)

    def expire(self) -> int:
        """Release everything when the lease ran out; return how many records went back."""
        with self._lock:
            if self._clock() < self._deadline or (self._source is None and not self._owners):
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

    def _drop_head(self, count: int) -> None:
        for column in (*self._columns, self._owners, self._indexes):
            del column[:count]
        self._base += count
        if self._read and self._read[0][0] < self._base:
            base = self._base
            self._read = [(max(start, base), end) for start, end in self._read if end > base]

    def _mark_read(self, start: int, end: int) -> None:
        merged: list[tuple[int, int]] = []
        for first, last in sorted([*self._read, (start, end)]):
            if merged and first <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        self._read = merged

    def _jump_to(self, start: int) -> None:
        # The consumer's checkpoint is ahead of this log (e.g. the broker restarted): a
        # cumulative ack up to ``start`` would ack records it never read, so return them.
        self._release()
        self._base = start

    def _fill(self, want: int) -> None:
        if self._source is None:
            self._source = self._subscribe()
        while (missing := want - self._base - len(self._owners)) > 0:
            pieces, self._spares = self._spares, []
            if not pieces:
                try:  # the group refills a member's prefetch asynchronously: linger briefly
                    pieces = receive_pieces(self._source, missing, self._linger)
                except TimeoutError:
                    return
            for number, (owner, indexes) in enumerate(pieces):
                if indexes is not None and len(indexes) > missing:
                    self._spares = [(owner, indexes[missing:]), *pieces[number + 1:]]
                    hold(self._columns, self._owners, self._indexes, owner,
                         indexes[:missing], self._reject)
                    break
                missing -= hold(self._columns, self._owners, self._indexes, owner,
                                indexes, self._reject)

    def _release(self) -> int:
        source, self._source = self._source, None
        owners, indexes = self._owners, self._indexes
        spares, self._spares = self._spares, []
        count = len(owners)
        read = [(start - self._base, end - self._base) for start, end in self._read]
        self._owners, self._indexes, self._read = [], [], []
        self._columns = LeaseColumns([], [], [], [], [], [])
        if count:
            self._released.append((self._base, self._base + count))
            del self._released[:-_RELEASED_RANGES]
        self._base += count
        return release_held(source, owners, indexes, spares, read)
