"""The topic's publish path for publishes and batches: the checks (closed, type), the
throttle and ``max_pending``, then the fan-out (room in every group and the ring, the
books, the hand-off)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from runtime.core._block import Block, Runs, ids_of
from runtime.core._envelope import KEY, Envelope
from runtime.core._future import MessageFuture
from runtime.core._message import Message, checked_attributes
from runtime.core._outcome import Outcome, PublishReport
from runtime.core._settings import TopicSettings, check_timeout
from runtime.core.settlement._delivery import Delivery
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._gate import GroupHandle, KeyMark
from runtime.core.subscribers._ring import Ring
from runtime.core.subscribers._subscribers import Subscribers
from runtime.errors import MessageTypeError, TopicClosedError, WouldBlock

__all__ = ["Oversized", "PartlyPublished", "PublishPath", "check_keys"]

# The largest chunk `PublishPath.room` makes (a Publisher's run of 16 batches of 100
# fits). Larger chunks cost the parent fewer reservations and arrivals per message but
# hand one group more at once; re-measure with ``python -m benchmarks --only
# pipeline_pool`` (its ordered rows).
MAX_CHUNK = 4096

_KEY_TYPES = frozenset({str, type(None)})

# Times a publisher yields the GIL before overwriting unread broadcast entries: more
# lets a merely unscheduled subscriber catch up, fewer costs a lagging one less
# (tests/runtime/core/subscribers exercise lagging readers).
_LAG_YIELDS = 3


def check_keys(keys: Sequence[Any]) -> None:
    """Refuse keys that are not a str or None (a group hashes them to pick a member);
    the callers skip it when every key's type is one of those.

    Raises:
        TypeError: naming the first bad key's type.
    """
    for key in keys:
        if key is not None and not isinstance(key, str):
            raise TypeError(f"a key must be a str or None, got {type(key).__qualname__}")


class PartlyPublished(Exception):  # not an error of its own: a partial result
    """A Publisher batch the topic accepted only in part (it closed, or a wait timed out).

    Args:
        ids: the ids of the messages accepted, a prefix of the batch in order.
        error: why the rest was refused; none of the rest entered the topic.
    """

    def __init__(self, ids: list[str], error: BaseException) -> None:
        super().__init__(ids, error)
        self.ids = ids
        self.error = error


class PublishPath:
    """Runs the guard chain in the calling thread (a user's, or the topic actor's).

    Args:
        topic: the topic's name.
        settings: the topic's settings.
        ledger: the topic's books.
        ring: the topic's broadcast ring.
        subscribers: the topic's subscribers (``handles``: the balanced groups).
        sleep: the throttle's sleep (injectable for tests).
    """

    def __init__(
        self, *, topic: str, settings: TopicSettings, ledger: Ledger, ring: Ring,
        subscribers: Subscribers, sleep: Callable[[float], Any],
    ) -> None:
        self._topic = topic
        self._settings = settings
        self._ledger = ledger
        self._ring = ring
        self._subscribers = subscribers
        self._sleep = sleep
        self._next_seq = 1  # the next message's number; taken under the lock
        self._seq_lock = threading.Lock()
        self._block = settings.balanced_on_full == "block"
        # The most messages fanned out at once: a chunk fits a group's queue and the ring
        # (more while the members have room and nobody reads the ring: `room`).
        self.chunk = min(settings.balanced_capacity, settings.broadcast_capacity)

    def check(self, messages: list[Any]) -> None:
        """Steps 1-2: the closed guard, then the type check of every message."""
        if self._ledger.closed:
            raise TopicClosedError(self._topic)
        expected = self._settings.message_type
        if expected is None:
            return
        for message in messages:
            if isinstance(message, expected):
                continue
            if isinstance(message, Message) and isinstance(message.data, expected):
                continue
            raise MessageTypeError(self._topic, expected.__qualname__, type(message).__qualname__)

    def admit(self, deadline: float | None) -> bool:
        """Steps 3-4: throttle, then wait for a ``max_pending`` slot; True if one was taken."""
        settings, ledger = self._settings, self._ledger
        max_pending = settings.max_pending
        if max_pending is None:
            return False
        if settings.throttle:
            ratio = (max_pending - ledger.pending) / max_pending
            if 0 < ratio <= settings.throttle:
                self._sleep(1 / (max_pending * ratio))
                ledger.count("throttled")
        ledger.take_slot(max_pending, deadline)
        return True

    def _take_seqs(self, count: int) -> int:
        """Reserve ``count`` consecutive message numbers; returns the first."""
        with self._seq_lock:
            first = self._next_seq
            self._next_seq = first + count
        return first

    def publish_one(
        self, message: Any, key: str | None, attributes: dict[str, str] | None,
        timeout: float | None,
    ) -> PublishReport:
        """`Topic.publish`: the whole chain for one message, each wait within ``timeout``."""
        if key is not None and type(key) is not str:
            check_keys([key])
        # Every check before anything is taken: a refused publish leaves nothing behind.
        attributes = {} if attributes is None else checked_attributes(attributes)
        if self._settings.message_type is not None or self._ledger.closed:  # else no check
            self.check([message])
        deadline = None
        if timeout is not None:
            check_timeout("timeout", timeout)
            deadline = time.monotonic() + timeout
        slotted = self._settings.max_pending is not None and self.admit(deadline)
        # Its number is its id (`message_id`). It counts as published once it has room
        # everywhere (`fan_out`): a refusal while waiting leaves no trace.
        with self._seq_lock:
            seq = self._next_seq
            self._next_seq = seq + 1
        envelope: Envelope = (seq, None, message, key or None, attributes, self._topic, None)
        future: Future[Outcome] = MessageFuture()
        balanced, broadcast = self.fan_out((envelope,), (envelope[KEY],), [future], slotted,
                                           deadline)
        return PublishReport(str(seq), balanced, broadcast, future)

    def refuse(self, message: Message, reason: str, error: str | None) -> None:
        """Dead-letter a Publisher message refused on its way in, under an id of its own."""
        envelope: Envelope = (
            self._take_seqs(1), None, message.data, message.ordering_key or None,
            message.attributes or None, self._topic, time.time(),
        )
        self._ledger.dead_letter_refused(envelope, reason, error)

    def stamp_parts(
        self, datas: list[bytes], attributes: Sequence[dict[str, str]],
        keys: Sequence[str | None],
    ) -> Block:
        """Steps 1-2 for a Publisher batch given as parallel lists (its keys, the closed
        guard, its type), then accept it as one `Block`: a new number (id) each, in
        increasing order, and one publish time (no envelope per message). `publish_envelopes`
        publishes it, now or later (staged rows are stamped when staged).

        Empty attributes become None: a message with none holds no dict of its own.

        Raises:
            TopicClosedError, MessageTypeError: nothing of the batch is accepted.
            TypeError: a key is not a str or None (nothing of the batch is accepted).
        """
        if not set(map(type, keys.values if type(keys) is Runs else keys)) <= _KEY_TYPES:
            check_keys(keys)
        if self._ledger.closed:
            raise TopicClosedError(self._topic)
        expected = self._settings.message_type
        if expected is not None and not issubclass(Message, expected):
            for data in datas:
                if not isinstance(data, expected):
                    raise MessageTypeError(self._topic, expected.__qualname__, "Message")
        size = len(datas)
        with self._seq_lock:
            first = self._next_seq
            self._next_seq = first + size
        return Block(
            range(first, first + size), datas, keys if keys.count(None) != size else None,
            [a or None for a in attributes] if any(attributes) else None, self._topic,
            time.time(),
        )

    def publish_envelopes(self, block: Block, deadline: float | None = None) -> Sequence[str]:
        """Steps 3-5 for a batch of `stamp_parts`: returns its ids in order. Blocks on
        backpressure until ``deadline`` (``time.monotonic()`` based; None: no bound;
        closing the topic wakes it).

        Without a throttle the batch is fanned out in chunks: each fits both a group's
        queue and (for a blocking ring) the ring, or the room there is now (`room`); with
        ``max_pending``, it is as many as there are free slots (waiting for one). A batch
        is admitted chunk by chunk, not message by message: the same bound, and one
        reservation and one entry in each group's arrivals per chunk instead of per
        message. The chunk waiting when ``deadline`` passes takes nothing (`fan_out`).

        Raises:
            PartlyPublished: the topic closed, or the deadline passed, after accepting
                part of the batch (the accepted prefix's ids and the refusal; the rest
                never entered it: not counted, not pending, no ``max_pending`` slot).
            TopicClosedError: the topic closed before any of the batch was accepted.
            WouldBlock: the deadline passed before any of the batch was accepted.
        """
        ledger, max_pending = self._ledger, self._settings.max_pending
        if ledger.closed:
            raise TopicClosedError(self._topic)
        error: BaseException | None = None
        if max_pending is not None and self._settings.throttle:
            accepted, error = self._publish_each(block, deadline)
        else:
            keys, size = block.keys, len(block.payloads)
            keyed = keys is not None and keys.count(None) != size
            accepted, fitted = 0, max_pending is not None  # fitted: chunks sized to the ring
            while accepted < size:
                count = min(self.chunk if fitted else self.room(keyed), size - accepted)
                try:
                    if max_pending is not None:
                        count = ledger.take_slots(count, max_pending, deadline)
                    chunk = block if count == size else block[accepted:accepted + count]
                    self.fan_out(chunk, [None] * count if chunk.keys is None else chunk.keys,
                                 None, max_pending is not None, deadline)
                except Oversized:
                    fitted = True  # nothing was taken: again, in chunks that fit the ring
                    continue
                except (WouldBlock, TopicClosedError) as exc:
                    error = exc
                    break
                accepted += count
        if error is None:
            return ids_of(block)
        if accepted:
            raise PartlyPublished(list(ids_of(block[:accepted])), error) from error
        raise error

    def room(self, keyed: bool) -> int:
        """The most messages one fan-out may take now: `chunk`, or, while no broadcast
        subscriber reads the ring, as many as every group can take without waiting (its
        queue's free room and what its members have free, up to `MAX_CHUNK`).

        A group with idle members then takes a Publisher's run of batches as one chunk:
        one reservation, one arrival and one sort by key where a chunk of 128 made eight.
        A stuck group lends nothing, so what runs ahead of it is bounded as before.
        """
        chunk, groups = self.chunk, self._subscribers.handles
        if not groups or self._ring.subscriber_count:
            return chunk
        least = MAX_CHUNK
        for group in groups:
            least = min(least, group.gate.free(keyed))
        return max(chunk, least)

    def _publish_each(
        self, block: Block, deadline: float | None,
    ) -> tuple[int, BaseException | None]:
        """`publish_envelopes` one message at a time, each through the throttle: how many
        were accepted, and why the rest were refused (None: none was)."""
        for index, envelope in enumerate(block):
            try:
                self.fan_out((envelope,), (envelope[KEY],), None, self.admit(deadline), deadline)
            except (WouldBlock, TopicClosedError) as exc:
                return index, exc
        return len(block), None

    def fan_out(
        self, envelopes: Sequence[Envelope], keys: Sequence[str | None],
        futures: list[Future[Outcome]] | None, slotted: bool, deadline: float | None,
    ) -> tuple[dict[str, str], int]:
        """Steps 5-8 for up to a chunk of messages (``keys``: theirs, in order): room in
        every group (and the ring), the books, the hand-off; returns (balanced, broadcast).

        While no broadcast subscriber reads the ring (the usual case) the ring's lock is
        not taken: a subscriber that joins meanwhile starts after these messages, as if
        it had joined just after the publish.
        """
        groups = self._subscribers.handles
        # A keyed message can go to one member only (stricter room; the group routes it).
        keyed = keys.count(None) != len(keys)
        admitted = self._take_room(groups, len(envelopes), keyed, slotted, deadline)
        lagged: list[tuple[int, Envelope]] = []
        try:
            if groups and not self._ring.subscriber_count:
                subscribers = 0
                # Reserved and counted published: past this only a close refuses them.
                self._ledger.reserve(envelopes, len(groups), futures, slotted, published=True)
            else:
                subscribers, lagged = self._fan_out_ring(groups, envelopes, futures, slotted,
                                                         deadline)
                if subscribers < 0:
                    return {}, 0  # no destination: dead-lettered
        except BaseException:
            _give_back(groups, admitted)
            raise
        settled = [Delivery.settled(e, sid, None, 0, "lagged") for sid, e in lagged] if lagged else []
        balanced = self._enqueue(groups, admitted, envelopes, keyed and _mark(keys), settled)
        if settled:
            self._ledger.settle(settled)
        return balanced, subscribers

    def _fan_out_ring(
        self, groups: list[GroupHandle], envelopes: Sequence[Envelope],
        futures: list[Future[Outcome]] | None, slotted: bool, deadline: float | None,
    ) -> tuple[int, list[tuple[int, Envelope]]]:
        """`fan_out`'s books and ring write under the ring's lock: (broadcast subscribers
        written for, entries lagged subscribers lost); -1 subscribers when there was no
        destination at all (the messages are dead-lettered ``no_subscribers``)."""
        self._let_readers_catch_up(len(envelopes))
        with self._ring.lock:
            self._wait_ring(len(envelopes), slotted, deadline)
            subscribers = self._ring.subscriber_count
            if not groups and not subscribers:
                self._ledger.count("published", len(envelopes))
                self._ledger.dead_letter_unrouted(envelopes, futures, slotted)
                return -1, []
            self._ledger.reserve(envelopes, len(groups) + subscribers, futures, slotted,
                                 published=True)
            lagged, wakes = self._ring.write_locked(envelopes) if subscribers else ([], [])
        for wake in wakes:
            wake()
        return subscribers, lagged

    def _let_readers_catch_up(self, count: int) -> None:
        """Before overwriting unread entries of a ring that does not block, yield the GIL
        a few times: a subscriber that is merely unscheduled catches up; never waits."""
        for _ in range(0 if self._ring.blocking else _LAG_YIELDS):
            if not self._ring.would_lag(count):
                return
            time.sleep(0)

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
