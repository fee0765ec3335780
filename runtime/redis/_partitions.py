"""A member of a topic of several partitions: the partitions it owns, and a broadcast
reader of every partition.

Each partition of a balanced group is owned by one member at a time (a lease in the
partition's hash slot, renewed while the member lives), so a key's messages, which all go
to one partition, run one after the other whichever process or host reads them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runtime.core._settings import TopicSettings
from runtime.errors import BackendUnavailableError
from runtime.redis._broadcast import BroadcastReader
from runtime.redis._connection import Connection
from runtime.redis._consumer import Consumer, consumer_name
from runtime.redis._delivery import RedisDelivery
from runtime.redis._keys import TopicKeys, entry_of
from runtime.redis._records import Codec

__all__ = ["LEASE", "AllPartitions", "OwnedPartitions", "give_back", "running_in"]

logger = logging.getLogger("runtime")

LEASE = 3.0
"""Seconds a partition's lease (and a member's place in its group) lasts unless renewed:
how long the partitions of a member that died wait before another member takes them."""
RENEW_EVERY = LEASE / 3
"""Seconds between a member's renewals of its leases, and its looks at how many members
its group has (when it gives back partitions beyond its share, or takes free ones)."""


class OwnedPartitions:
    """What one member of a group reads: the partitions it owns, one `Consumer` each.

    A member owns at most ``ceil(partitions / members)`` of them. At each look (every
    `RENEW_EVERY`, between two batches) it renews its leases, gives back what exceeds its
    share once more members live (after settling its batch: what it holds goes back to
    the group, no attempt counted) and takes free partitions up to its share. A partition
    it takes starts with what its former owner held (oldest first, counted as an attempt
    when that owner died, as after an ack deadline), then what waits in it.

    Within a partition, a nack or a delivery skipped past its deadline sends the rest of
    the batch of that partition back, so the redelivery runs before the key's later
    messages.

    Args:
        connection: the bus's connection.
        topic: the topic's name.
        group: the balanced group.
        subscriber_id: the member's subscription id.
        settings: the topic's settings (``partitions`` of them).
        codec: decodes entries.
        batch_acks: as for `Consumer`.
        clock: the member's time source.
        name: the member's consumer name (default: a new one).
    """

    def __init__(self, connection: Connection, topic: str, group: str, subscriber_id: int,
                 settings: TopicSettings, codec: Codec, *, batch_acks: bool,
                 clock: Callable[[], float] = time.monotonic, name: str | None = None) -> None:
        self.name = consumer_name(subscriber_id) if name is None else name
        self.group = group
        self.subscriber_id = subscriber_id
        self._connection = connection
        self._topic = topic
        self._settings = settings
        self._codec = codec
        self._batch_acks = batch_acks
        self._clock = clock
        self._keys = [TopicKeys.of(topic, p) for p in range(settings.partitions)]
        self._members_key = self._keys[0].members(group)
        self._lease_ms = int(LEASE * 1000)
        self._owned: dict[int, Consumer] = {}
        self._next_look = 0.0
        self._turn = 0
        self._first = zlib.crc32(self.name.encode()) % settings.partitions
        self._idle = threading.Event()  # set on release: an idle wait ends

    def __repr__(self) -> str:
        return f"OwnedPartitions({self.name!r}, group={self.group!r}, owns={sorted(self._owned)})"

    @property
    def owned(self) -> list[int]:
        """The partitions this member owns now."""
        return sorted(self._owned)

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]:
        """Up to ``count`` deliveries of one owned partition (in turn), waiting up to
        ``block`` seconds when none is ready.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        if self._clock() >= self._next_look:
            self._look()
        for consumer in self._owned.values():
            if consumer.disturbed:
                consumer.hand_back()
        owned = [self._owned[p] for p in sorted(self._owned)]
        if not owned:
            if block:
                self._idle.wait(min(block, RENEW_EVERY))
            return []
        self._turn += 1
        return _read_in_turn(owned, self._turn, count, block)

    def expired(self, delivery: RedisDelivery[Any]) -> bool:
        """Whether ``delivery`` must not run now: it waited half its deadline, its partition
        is no longer this member's, or an earlier delivery of its partition in this batch was
        nacked or skipped (it goes back, to run after that one's redelivery)."""
        consumer = self._owned.get(delivery.partition)
        if consumer is None or consumer.disturbed:
            return True
        return consumer.expired(delivery)

    def give_back(self, deliveries: list[RedisDelivery[Any]]) -> None:
        """Hand ``deliveries`` (never started, all of one partition) back with no attempt
        counted while this member still owns their partition (else its new owner holds
        them already).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        consumer = self._owned.get(deliveries[0].partition) if deliveries else None
        if consumer is not None:
            consumer.give_back(deliveries)

    def flush(self, *, due_only: bool = False) -> None:
        """Send the queued acks of every owned partition.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        for consumer in list(self._owned.values()):
            consumer.flush(due_only=due_only)

    def release(self, running: str = "") -> tuple[int, int]:
        """Hand back what this member holds in every partition, give its leases back and
        leave the group (see `Consumer.release`). Returns (handed back, running found)."""
        self._idle.set()
        held = crashed = 0
        owned, self._owned = self._owned, {}
        for partition, consumer in owned.items():
            try:
                h, c = consumer.release(running_in(running, partition))
            except BackendUnavailableError as exc:
                logger.warning("topic %s: could not hand back partition %d of %s (%s); it "
                               "returns after its lease", self._topic, partition, self.name, exc)
                continue
            held, crashed = held + h, crashed + c
        give_back(self._connection, self._keys, self.group, self.name, owned)
        return held, crashed

    def _look(self) -> None:
        """Renew, give back beyond the share, take free partitions up to it."""
        self._next_look = self._clock() + RENEW_EVERY
        connection = self._connection
        members = int(connection.run("HEARTBEAT", [self._members_key],
                                     [self.name, self._lease_ms, ""]))
        share = math.ceil(len(self._keys) / max(members, 1))
        mine = sorted(self._owned)
        if mine:
            renewed = connection.pipelined("LEASE", [
                ([self._keys[p].owner(self.group)], [self.name, self._lease_ms]) for p in mine])
            for partition, verdict in zip(mine, renewed, strict=True):
                if int(verdict) == 0:  # another member holds it: this one stalled
                    logger.warning("topic %s: %s lost partition %d of group %s to another "
                                   "member", self._topic, self.name, partition, self.group)
                    self._drop(partition)
        extra = sorted(self._owned)[share:]
        for partition in extra:
            self._give(partition)
        partitions = len(self._keys)
        for step in range(partitions):
            if len(self._owned) >= share:
                break
            partition = (self._first + step) % partitions
            if partition in self._owned:
                continue
            verdict = connection.run("LEASE", [self._keys[partition].owner(self.group)],
                                     [self.name, self._lease_ms])
            if int(verdict) != 0:
                self._take(partition)

    def _consumer(self, partition: int) -> Consumer:
        return Consumer(self._connection, self._keys[partition], self._topic, self.group,
                        self.subscriber_id, self._settings, self._codec,
                        batch_acks=self._batch_acks, clock=self._clock, partition=partition,
                        name=self.name, ordered=True)

    def _take(self, partition: int) -> None:
        consumer = self._consumer(partition)
        self._owned[partition] = consumer
        taken = consumer.take_over()
        logger.info("topic %s: %s owns partition %d of group %s (%d deliveries taken over)",
                    self._topic, self.name, partition, self.group, taken)

    def _give(self, partition: int) -> None:
        consumer = self._owned.pop(partition)
        consumer.release()
        self._connection.run("UNLEASE", [self._keys[partition].owner(self.group)], [self.name])

    def _drop(self, partition: int) -> None:
        consumer = self._owned.pop(partition)
        try:
            consumer.release()
        except BackendUnavailableError:
            logger.warning("topic %s: deliveries of partition %d stay with %s until their "
                           "deadline", self._topic, partition, self.name)


class _Reads(Protocol):
    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]: ...


def _read_in_turn(sources: Sequence[_Reads], turn: int, count: int,
                 block: float | None) -> list[RedisDelivery[Any]]:
    """Up to ``count`` deliveries from the first of ``sources`` (starting at ``turn``,
    round) that has some; with ``block``, the last one waits for what is left of it."""
    start = turn % len(sources)
    order = [*sources[start:], *sources[:start]]
    for source in order[:-1] if block else order:
        found = source.read(count, None)
        if found:
            return found
    if not block:
        return []
    return order[-1].read(count, block / len(order))


def give_back(connection: Connection, keys: list[TopicKeys], group: str, name: str,
              partitions: Any = None) -> None:
    """Give member ``name``'s leases of ``group`` back (of ``partitions``, default every
    one) and take it out of the group's members: what a stopping member does, and what a
    parent does for a worker that died."""
    chosen = range(len(keys)) if partitions is None else partitions
    try:
        connection.pipelined("UNLEASE", [([keys[p].owner(group)], [name]) for p in chosen])
        connection.run("HEARTBEAT", [keys[0].members(group)], [name, 0, "leave"])
    except BackendUnavailableError as exc:
        logger.warning("group %s: member %s's leases end by themselves (%s)", group, name, exc)


def running_in(running: str, partition: int) -> str:
    """The entry id of ``running`` (a delivery's `message_id_of` its partition and entry,
    or "") when it is of ``partition``, else ""."""
    if not running:
        return ""
    where, entry_id = entry_of(running)
    return entry_id if where == partition else ""


class AllPartitions:
    """A broadcast subscriber of a topic of several partitions: one `BroadcastReader` per
    partition, read in turn.

    Args:
        connection, topic, subscriber_id, settings, codec, clock: as for
            `BroadcastReader` (``settings.partitions`` readers).
    """

    def __init__(self, connection: Connection, topic: str, subscriber_id: int,
                 settings: TopicSettings, codec: Codec, clock: Callable[[], float]) -> None:
        self.subscriber_id = subscriber_id
        self._readers = [
            BroadcastReader(connection, TopicKeys.of(topic, p), topic, subscriber_id,
                            settings, codec, clock, partition=p)
            for p in range(settings.partitions)]
        self._turn = 0

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]:
        """Up to ``count`` entries of one partition, the next with entries in turn.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        self._turn = (self._turn + 1) % len(self._readers)
        return _read_in_turn(self._readers, self._turn, count, block)

    def expired(self, delivery: RedisDelivery[Any]) -> bool:
        """Whether ``delivery``'s ack deadline passed while it waited in the batch."""
        return self._readers[0].expired(delivery)

    def give_back(self, deliveries: list[RedisDelivery[Any]]) -> None:
        """Nothing: broadcast never redelivers (see `BroadcastReader.give_back`)."""

    def flush(self, *, due_only: bool = False) -> None:
        """Nothing waits: a reader settles each delivery as it happens."""

    def detach(self) -> None:
        """Leave every partition's readers."""
        for reader in self._readers:
            reader.detach()
