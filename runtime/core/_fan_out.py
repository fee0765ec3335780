"""Steps 5-8 of the publish path: room in every group and the ring, the books, the hand-off."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from runtime.core._block import keys_of
from runtime.core._envelope import Envelope
from runtime.core._future import MessageFuture
from runtime.core._outcome import Outcome, PublishReport, new_report
from runtime.core.settlement._delivery import Delivery
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._arrivals import KeyMark
from runtime.core.subscribers._gate import GroupHandle
from runtime.core.subscribers._ring import Ring
from runtime.errors import TopicClosedError

__all__ = ["FanOut", "Oversized"]

# Times a publisher yields the GIL before overwriting unread broadcast entries.
_LAG_YIELDS = 3


class FanOut:
    """The fan-out half of `PublishPath` (a mixin over its topic, ledger, ring and groups)."""

    _topic: str
    _ledger: Ledger
    _ring: Ring
    _groups: Callable[[], list[GroupHandle]]
    _block: bool
    _take_seqs: Callable[[int], int]

    def fan_out(
        self, envelopes: Sequence[Envelope], futures: list[Future[Outcome]] | None,
        slotted: bool, deadline: float | None,
    ) -> tuple[dict[str, str], int]:
        """Steps 5-8 for up to ``balanced_capacity`` messages; returns (balanced, broadcast)."""
        groups = self._groups()
        keys = keys_of(envelopes)
        # A keyed message can go to one member only (stricter room; the group routes it).
        keyed = keys.count(None) != len(keys)
        admitted = self._take_room(groups, len(envelopes), keyed, slotted, deadline)
        self._let_readers_catch_up(len(envelopes))
        try:
            with self._ring.lock:
                self._wait_ring(len(envelopes), slotted, deadline)
                subscribers = self._ring.subscriber_count
                # Published from here on: it had room everywhere, nothing can refuse it now
                # but a close (which `reserve` raises before reserving anything).
                if not groups and not subscribers:
                    self._ledger.count("published", len(envelopes))
                    self._ledger.dead_letter_unrouted(envelopes, futures, slotted)
                    return {}, 0
                self._ledger.reserve(envelopes, len(groups) + subscribers, futures, slotted)
                self._ledger.count("published", len(envelopes))
                lagged, wakes = self._ring.write_locked(envelopes) if subscribers else ([], [])
        except BaseException:
            _give_back(groups, admitted)
            raise
        for wake in wakes:
            wake()
        settled = [Delivery.settled(e, sid, None, 0, "lagged") for sid, e in lagged] if lagged else []
        balanced = self._enqueue(groups, admitted, envelopes, keyed and _mark(keys), settled)
        if settled:
            self._ledger.settle(settled)
        return balanced, subscribers

    def _let_readers_catch_up(self, count: int) -> None:
        """Before overwriting unread entries of a ring that does not block, yield the GIL
        a few times: a subscriber that is merely unscheduled catches up; never waits."""
        for _ in range(0 if self._ring.blocking else _LAG_YIELDS):
            if not self._ring.would_lag(count):
                return
            time.sleep(0)

    def publish_lone(
        self, groups: list[GroupHandle], message: Any, key: str | None,
        attributes: dict[str, str], deadline: float | None,
    ) -> PublishReport:
        """One ``topic.publish`` into ``groups`` (at least one) while no broadcast
        subscriber reads the ring and no ``max_pending`` applies: room in each group, a
        number, one reservation (which counts it published), then the arrivals.

        A subscriber that joins meanwhile starts after this message, as if it had joined
        just after the publish. Against `fan_out` (lists, the ring's lock, a second lock
        for the count), a publish into a group cost its thread 7.0-7.8 µs instead of
        11.6-13.6 (/tmp/p40/pubab.py, medians of four runs a side); sharing `_enqueue`
        instead of a copy of its loop was within noise of that (six runs a side).
        """
        admitted = self._take_room(groups, 1, key is not None, False, deadline)
        outcome: Future[Outcome] = MessageFuture()
        seq = self._take_seqs(1)
        try:
            self._ledger.reserve_one(seq, len(groups), outcome)
        except BaseException:
            _give_back(groups, admitted)
            raise
        envelope = (seq, None, message, key, attributes, self._topic, None)
        settled: list[Delivery[Any]] = []
        balanced = self._enqueue(groups, admitted, (envelope,), key or False, settled)
        if settled:
            self._ledger.settle(settled)
        return new_report(str(seq), balanced, 0, outcome)

    def _wait_ring(self, count: int, slotted: bool, deadline: float | None) -> None:
        """With a blocking ring, wait (ring lock held) for room; a refusal gives the
        ``max_pending`` slots back (the caller gives the groups' room back). A chunk
        larger than the ring is refused (`Oversized`) once a subscriber reads it."""
        ring = self._ring
        try:
            if count > ring.capacity and ring.subscriber_count:
                raise Oversized  # the subscriber came since `PublishPath.room` sized it
            if ring.blocking:
                ring.wait_room_locked(count, deadline)
        except BaseException:
            if slotted:
                self._ledger.release_slots(count)
            raise

    def _take_room(
        self, groups: list[GroupHandle], count: int, keyed: bool, slotted: bool,
        deadline: float | None,
    ) -> list[int]:
        """Room per group for ``count`` messages: ``count``, fewer (drop_newest), or -1
        (the group is gone)."""
        admitted: list[int] = []
        try:
            for group in groups:
                if self._block:
                    admitted.append(count if group.gate.acquire(count, deadline, keyed) else -1)
                else:
                    admitted.append(group.gate.try_acquire(count, keyed))
                if admitted[-1] < 0 and self._ledger.closed:
                    raise TopicClosedError(self._topic)
        except BaseException:
            _give_back(groups, admitted)  # the groups before the refusing one
            if slotted:
                self._ledger.release_slots(count)
            raise
        return admitted

    def _enqueue(
        self, groups: list[GroupHandle], admitted: list[int], envelopes: Sequence[Envelope],
        mark: KeyMark, settled: list[Delivery[Any]],
    ) -> dict[str, str]:
        balanced = {}
        for group, taken in zip(groups, admitted, strict=True):
            if taken == len(envelopes):
                group.arrivals.put(envelopes, mark)
                balanced[group.name] = "enqueued"
                continue
            if taken > 0:
                group.arrivals.put(envelopes[:taken], mark)
            reason = "dropped" if taken >= 0 else "unsubscribed"
            settled.extend(
                Delivery.settled(e, -1, group.name, 0, reason) for e in envelopes[max(taken, 0):]
            )
            balanced[group.name] = "dropped"
        return balanced


class Oversized(Exception):
    """A chunk sized past the ring's capacity while no broadcast subscriber read it met
    one: nothing of it was taken; it goes again in chunks that fit the ring."""


def _give_back(groups: list[GroupHandle], admitted: list[int]) -> None:
    """Release the room taken in each group (``admitted`` may stop short of ``groups``)."""
    for group, taken in zip(groups, admitted, strict=False):  # shorter after a refusal
        if taken > 0:
            group.gate.release(taken)


def _mark(keys: Sequence[str | None]) -> KeyMark:
    """A keyed chunk's keys for its group: the one key all of its messages share (an
    ordered Publisher's batch), or True (several; False marks a chunk without keys)."""
    first = keys[0]
    return first if first is not None and keys.count(first) == len(keys) else True
