"""The tracker's books: pending messages, their destinations, deadlines and stats.

One `Ledger` per topic, guarded by one lock. Publishing threads reserve here
synchronously (so a reservation always happens before the fan-out it covers); the
tracker actor applies settlements, deadline expiries and the close sweep. Work that
may call user code (outcome futures, dead-letter callbacks, redeliveries) is collected
under the lock and run after it is released. The books' ack deadlines of hand-overs,
and when the timer must next wake the tracker, are its `Deadlines`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from functools import partial
from operator import itemgetter
from typing import Any

from runtime.core._block import Block
from runtime.core._envelope import SEQ, Envelope
from runtime.core._future import resolve
from runtime.core._outcome import ACKED_OUTCOME, Nack, Outcome, OutcomeTrack
from runtime.core._stats import Counters, TopicStats
from runtime.core.settlement._claims import all_acked, claim_all, handovers_of
from runtime.core.settlement._dead_letters import DeadLetterQueue, dead_letter_of
from runtime.core.settlement._delivery import ACKED, Delivery, HandOver, Tranche
from runtime.errors import TopicClosedError, WouldBlock

__all__ = ["Deadlines", "Ledger"]

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
        """Give ``handover`` (registered, with its id) its deadline, ``ack_timeout`` from
        now, and its renewal time; again to renew it (its earlier entry comes first and
        is skipped then).

        Returns when the timer must wake the tracker, if it is not armed already.
        """
        timeout = self._ack_timeout
        if timeout is None:
            return None
        when = self._clock() + timeout
        handover.deadline, handover.renew_at = when, when - _RENEW_SHARE * timeout
        self._queue.append((when, handover.id))
        if self._wake_at is not None:
            return None
        self._wake_at = when
        return when

    def due(self, handover: HandOver) -> bool:
        """True when a quarter of ``handover``'s deadline has run (time to renew it): its
        ``renew_at`` passed, which a handler's loop may read itself."""
        return self._ack_timeout is not None and self._clock() > handover.renew_at

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
                left = timeout - max(ran, 0.0)
                when = self._clock() + left
                handover.deadline, handover.renew_at = when, when - _RENEW_SHARE * left
                if left == timeout:  # not started: a full deadline, in order
                    self._queue.append((when, handover.id))
                else:
                    heapq.heappush(self._shorter, (when, handover.id))
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


# Failures a balanced delivery may be retried after, while attempts remain.
RETRYABLE = frozenset({"nack", "timeout", "error", "worker_crashed"})
_COUNTED = frozenset({"dropped", "lagged"})  # reasons with counters of their own

Effect = Callable[[], Any]
_SEQ_OF = itemgetter(SEQ)


class Ledger:
    """Books of one topic. Thread-safe.

    Args:
        topic: the topic's name.
        ack_timeout: seconds from hand-over to a delivery's deadline (None: none).
        max_attempts: delivery attempts per balanced destination.
        dead_letters: where failed settlements go.
        clock: the time source for deadlines.
    """

    def __init__(
        self, *, topic: str, ack_timeout: float | None, max_attempts: int,
        dead_letters: DeadLetterQueue, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._max_attempts = max_attempts
        self._dead_letters = dead_letters
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._counters = Counters()
        self._tracks: dict[int, OutcomeTrack] = {}
        self._live: dict[int, HandOver] = {}
        # Replayed letters of one message share one track (its seq): the message is
        # pending and delivered once, however many of its destinations get it back.
        self._replay_seqs: dict[str, int] = {}
        self._replayed_ids: dict[int, str] = {}
        self._handover_ids = itertools.count(1)
        self._deadlines = Deadlines(ack_timeout, clock)
        self._schedule: Callable[[float], None] = lambda when: None
        self._redeliver: Callable[[Delivery[Any]], None] = lambda delivery: None
        self.pending = 0
        self.closed = False

    def bind(
        self, *, schedule: Callable[[float], None], redeliver: Callable[[Delivery[Any]], None],
    ) -> None:
        """Connect the timer (``schedule(when)``) and the groups (``redeliver``)."""
        self._schedule = schedule
        self._redeliver = redeliver

    # -- publishing side ----------------------------------------------------------

    def count(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to counter ``name`` (``published`` or ``throttled``)."""
        with self._lock:
            setattr(self._counters, name, getattr(self._counters, name) + amount)

    def reserve(
        self, envelopes: Sequence[Envelope], destinations: int,
        futures: list[Future[Outcome]] | None, slotted: bool, *, published: bool = False,
    ) -> None:
        """Count ``destinations`` pending settlements for each message, before any send
        (``published``: and count the messages published, under the same lock).

        Raises:
            TopicClosedError: the topic closed; nothing was reserved (slots are released).
        """
        with self._lock:
            if self.closed:
                if slotted:
                    self.pending -= len(envelopes)
                    self._changed.notify_all()
                raise TopicClosedError(self._topic)
            if not slotted:
                self.pending += len(envelopes)
            if published:
                self._counters.published += len(envelopes)
            if destinations > 1 or futures is not None:
                tracks = self._tracks
                seqs = envelopes.seqs if type(envelopes) is Block else map(_SEQ_OF, envelopes)
                if futures is None:
                    for seq in seqs:
                        tracks[seq] = OutcomeTrack(destinations, None)
                else:
                    for seq, future in zip(seqs, futures, strict=True):
                        tracks[seq] = OutcomeTrack(destinations, future)

    def replay_seq(self, message_id: str, fresh: Iterator[int]) -> int:
        """The sequence number a replayed letter of ``message_id`` travels under: that of
        the message's letters still out, else ``next(fresh)``."""
        with self._lock:
            seq = self._replay_seqs.get(message_id)
        return next(fresh) if seq is None else seq

    def reserve_replay(self, envelope: Envelope, message_id: str) -> None:
        """Count a replayed letter pending: a destination more on its message's track
        when other letters of it are out, else the message pending anew.

        Raises:
            TopicClosedError: the topic closed; nothing was reserved.
        """
        with self._lock:
            if self.closed:
                raise TopicClosedError(self._topic)
            seq = envelope[SEQ]
            track = self._tracks.get(seq)
            if track is not None:
                track.remaining += 1
                return
            self.pending += 1
            self._tracks[seq] = OutcomeTrack(1, None)
            self._replay_seqs[message_id] = seq
            self._replayed_ids[seq] = message_id

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

    def take_slots(self, count: int, max_pending: int, deadline: float | None = None) -> int:
        """Wait until fewer than ``max_pending`` messages are pending, then take up to
        ``count`` slots (as many as are free); returns how many.

        Blocks until ``deadline`` (``time.monotonic()`` based; None: no bound).

        Raises:
            TopicClosedError: the topic closed (also while waiting).
            WouldBlock: the deadline passed first (no slot was taken).
        """
        with self._changed:
            while not self.closed and self.pending >= max_pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WouldBlock(f"topic {self._topic!r} has {max_pending} pending messages")
                self._changed.wait(remaining)
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

    def dead_letter_unrouted(
        self, envelopes: Sequence[Envelope], futures: list[Future[Outcome]] | None, slotted: bool,
    ) -> None:
        """Dead-letter messages published while the topic had no destination."""
        effects: list[Effect] = []
        outcome = Outcome(acked=False, nacks=(Nack("none", "no_subscribers"),))
        with self._changed:
            for envelope in envelopes:
                self._counters.nacked += 1
                self._bury(Delivery.settled(envelope, -1, None, 0, "no_subscribers"), effects)
            if slotted:
                self.pending -= len(envelopes)
                self._changed.notify_all()
        run_effects(effects)
        for future in futures or ():
            resolve(future, outcome)

    def dead_letter_refused(self, envelope: Envelope, reason: str, error: str | None) -> None:
        """Dead-letter a message refused on its way in (counts as published and nacked)."""
        effects: list[Effect] = []
        with self._changed:
            self._counters.published += 1
            self._counters.nacked += 1
            self._bury(Delivery.settled(envelope, -1, None, 0, reason, error), effects)
        run_effects(effects)

    def settle_unreached(
        self, items: Sequence[tuple[Envelope, int]], reason: str,
        make: Callable[[Envelope, int], Delivery[Any]],
    ) -> None:
        """Apply queued messages (envelope, attempt) that never reached a member, failed
        with ``reason``: as `settle` of their deliveries (``make`` builds one).

        When none can be retried or watched (no outcome, no callback, a bounded
        dead-letter queue), only the letters the queue keeps (the newest) are built,
        not one per queued message.
        """
        keep, tracks = self._dead_letters.keeps(), self._tracks
        if (
            keep is None or (reason in RETRYABLE and not self.closed) or reason in _COUNTED
            or (tracks and any(envelope[SEQ] in tracks for envelope, _ in items))
        ):  # each message as one delivery: retries, counters, outcomes, callbacks, order
            self.settle([make(envelope, attempt) for envelope, attempt in items])
            return
        with self._changed:
            skipped = max(len(items) - keep, 0)
            self._dead_letters.append_tail(
                [dead_letter_of(make(e, a), self._topic) for e, a in items[skipped:]], skipped)
            self._counters.nacked += len(items)
            self._counters.dead_lettered += len(items)
            self.pending -= len(items)
            self._changed.notify_all()

    # -- subscriber side ----------------------------------------------------------

    def register(self, handover: HandOver) -> bool:
        """Record a hand-over (and its deadline); False when the topic is closed."""
        with self._lock:
            if self.closed:
                return False
            hid = next(self._handover_ids)
            handover.id = hid
            self._live[hid] = handover
            wake_at = self._deadlines.add(handover)
        if wake_at is not None:
            self._schedule(wake_at)
        return True

    def renew(self, handover: HandOver, *, force: bool = False) -> None:
        """Extend ``handover``'s ack deadline to ``ack_timeout`` from now: a handler just
        reached it (``force``: always; else once a quarter of the deadline has run, so a
        member working through a batch pays a clock read per delivery, not a lock)."""
        deadlines = self._deadlines
        if not force and not deadlines.due(handover):
            return
        with self._lock:
            wake_at = deadlines.add(handover) if handover.id in self._live else None
        if wake_at is not None:
            self._schedule(wake_at)

    def release(self, handover: HandOver) -> None:
        """Forget ``handover`` once nothing of it is pending: its subscriber gave its
        messages back unsettled (they stay pending as messages, in their group)."""
        with self._lock:
            if handover.id in self._live and handover.settled():
                del self._live[handover.id]

    def settle(self, deliveries: Sequence[Delivery[Any]]) -> None:
        """Apply settled deliveries: outcomes, stats, dead letters, redeliveries."""
        effects: list[Effect] = []
        with self._lock:
            self._apply(deliveries, effects)
            self._changed.notify_all()
        run_effects(effects)

    def settle_whole(self, tranche: Tranche) -> None:
        """Apply a tranche whose worker acked it whole (`Tranche.claim_whole` won).

        One ack for each of its messages: a message with no track had one destination
        and no future. The last ack of one that no destination nacked completes it here,
        its future resolved after the lock; the others go through `_complete`. The
        common case (every destination acked) costs one dict lookup and no call per
        message.
        """
        effects: list[Effect] = []
        acked: list[Future[Outcome]] = []
        envelopes = tranche.envelopes
        with self._lock:
            self._live.pop(tranche.id, None)
            completed = len(envelopes)
            tracks = self._tracks
            if tracks:
                completed = 0
                for seq in (envelopes.seqs if type(envelopes) is Block
                            else map(_SEQ_OF, envelopes)):
                    track = tracks.get(seq)
                    if track is None:
                        completed += 1
                    elif track.remaining == 1 and track.nacks is None:
                        del tracks[seq]
                        completed += 1
                        if track.future is not None:
                            acked.append(track.future)
                    else:
                        track.remaining -= 1
                        if track.remaining == 0:
                            self._complete(seq, track, effects)
            self.pending -= completed
            self._counters.delivered += completed
            self._changed.notify_all()
        for future in acked:  # first: it raises nothing
            try:
                future.set_result(ACKED_OUTCOME)
            except InvalidStateError:  # done already (a caller's plain Future, cancelled)
                pass
        for effect in effects:
            effect()

    def expire(self) -> None:
        """Nack (``timed_out``) every delivery whose deadline passed; re-arm the timer."""
        effects: list[Effect] = []
        with self._lock:
            expired: list[Delivery[Any]] = []
            for handover in self._deadlines.pop_expired(self._live):
                expired.extend(claim_all(handover, "timeout"))
            self._apply(expired, effects)
            self._changed.notify_all()
            wake_at = self._deadlines.rearm()
        run_effects(effects)
        if wake_at is not None:
            self._schedule(wake_at)

    def sweep(self, reason: str) -> None:
        """Force-nack every delivery handed over and not settled yet (on close)."""
        effects: list[Effect] = []
        with self._lock:
            swept: list[Delivery[Any]] = []
            for handover in list(self._live.values()):
                swept.extend(claim_all(handover, reason))
            self._apply(swept, effects)
            self._changed.notify_all()
        run_effects(effects)

    # -- topic side ---------------------------------------------------------------

    def close(self) -> None:
        """Refuse reservations and hand-overs from now on; wake every waiter."""
        with self._lock:
            self.closed = True
            self._changed.notify_all()

    def stats(self) -> TopicStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            return self._counters.snapshot(self.pending)

    def reset_stats(self) -> None:
        """Zero the counters (``pending`` is a gauge and stays)."""
        with self._lock:
            self._counters.reset()

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until nothing is pending or ``timeout`` passes; True when idle."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self.pending:
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    # -- internals (lock held) ----------------------------------------------------

    def _apply(self, deliveries: Sequence[Delivery[Any]], effects: list[Effect]) -> None:
        live = self._live
        for handover in handovers_of(deliveries):  # forget the ones now fully settled
            if handover.id in live and handover.settled():
                del live[handover.id]
        tracks = self._tracks
        if not tracks and all_acked(deliveries):  # a member's acks, no outcome tracked
            self.pending -= len(deliveries)
            self._counters.delivered += len(deliveries)
            return
        completed = delivered = 0
        for delivery in deliveries:
            track = tracks.get(delivery._envelope[SEQ]) if tracks else None
            if delivery._state is not ACKED:
                self._fail(delivery, track, effects)
            elif track is None:
                completed += 1
                delivered += 1
            else:
                track.remaining -= 1
                if track.remaining == 0:
                    self._complete(delivery._envelope[SEQ], track, effects)
        self.pending -= completed
        self._counters.delivered += delivered

    def _fail(self, delivery: Delivery[Any], track: OutcomeTrack | None, effects: list[Effect]) -> None:
        counters = self._counters
        reason, error, timed_out = delivery._failure
        group = delivery._handover.group
        if timed_out:
            counters.timed_out += 1
        else:
            counters.nacked += 1
        if reason == "dropped":
            counters.dropped += 1
        elif reason == "lagged":
            counters.lagged += 1
        if (
            group is not None and reason in RETRYABLE and not self.closed
            and delivery._attempt < self._max_attempts
        ):
            counters.redelivered += 1
            effects.append(lambda: self._redeliver(delivery))
            return
        self._bury(delivery, effects)
        if track is None:
            self.pending -= 1
            return
        destination = (
            f"group:{group}" if group is not None
            else f"subscriber:{delivery._handover.subscriber_id}"
        )
        track.nack(Nack(destination, reason, error))
        track.remaining -= 1
        if track.remaining == 0:
            self._complete(delivery._envelope[SEQ], track, effects)

    def _complete(self, seq: int, track: OutcomeTrack, effects: list[Effect]) -> None:
        del self._tracks[seq]
        if seq < 0:  # a replay's track
            self._replay_seqs.pop(self._replayed_ids.pop(seq, ""), None)
        self.pending -= 1
        outcome = track.outcome()
        if outcome.acked:
            self._counters.delivered += 1
        future = track.future
        if future is not None:
            effects.append(lambda: resolve(future, outcome))

    def _bury(self, delivery: Delivery[Any], effects: list[Effect]) -> None:
        dead_letter = dead_letter_of(delivery, self._topic)
        self._counters.dead_lettered += 1
        callback = self._dead_letters.append(dead_letter)
        if callback is not None:
            effects.append(lambda: self._dead_letters.notify(callback, dead_letter))


def run_effects(effects: list[Effect]) -> None:
    """Run what was collected under the lock (outcomes, callbacks, redeliveries)."""
    for effect in effects:
        effect()
