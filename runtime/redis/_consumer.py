"""One Redis consumer of a balanced group: reads, reclaims, settles and hands back."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from runtime.core._settings import TopicSettings
from runtime.errors import BackendUnavailableError
from runtime.redis._connection import Connection
from runtime.redis._delivery import RedisDelivery
from runtime.redis._keys import TopicKeys, message_id_of
from runtime.redis._records import Codec, UndecodableError, optional

__all__ = ["Consumer", "consumer_name"]

logger = logging.getLogger("runtime")

RECLAIM_EVERY = 0.25
"""Seconds between a member's looks for expired or handed-back deliveries at most (a
quarter of ``ack_timeout`` when that is shorter): how late a redelivery can start, against
one script call per member per period."""
TRIM_EVERY = 1.0
"""Seconds between a member's trims of the stream (entries every group settled go)."""
FLUSH_AFTER = 0.025
"""Seconds a batched ack may wait for its neighbours before the member sends them. Acks
usually leave sooner, with the member's next read (a read holds about
`runtime.redis._member.READ_WORK` of handler time, less than this, so they seldom take a
round trip of their own); this bounds a batch that runs long, as the in-memory members'
flusher does. Each flush is a round trip the member waits for."""


def consumer_name(subscriber_id: int) -> str:
    """A consumer name no other process or member uses; it ends in the subscription id
    (the scripts read a dead letter's ``subscriber_id`` from it)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{subscriber_id}"


class Consumer:
    """A member's consumer in its group: the reads and settlements of one member.

    Args:
        connection: the bus's Redis connection.
        keys: the topic's keys.
        topic: the topic's name.
        group: the balanced group (a Redis consumer group).
        subscriber_id: the member's subscription id.
        settings: the topic's settings (ack deadline, attempts, dead-letter bound).
        codec: decodes entries.
        batch_acks: acks well before their deadline wait for the member's next
            `flush` (a push member's loop); else each ack is one call.
        clock: the member's time source.
        partition: the partition ``keys`` belong to.
        name: the consumer's name (default: a new `consumer_name`).
        ordered: the member owns the partition (a topic of several partitions): what it
            reclaims is read to the end before any new entry, so a redelivery of a key
            runs before the key's later messages.
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, group: str,
                 subscriber_id: int, settings: TopicSettings, codec: Codec, *,
                 batch_acks: bool, clock: Callable[[], float] = time.monotonic,
                 partition: int = 0, name: str | None = None, ordered: bool = False) -> None:
        self.name = consumer_name(subscriber_id) if name is None else name
        self.group = group
        self.subscriber_id = subscriber_id
        self.partition = partition
        # Set when a delivery of the batch was nacked or skipped: the rest of the batch
        # must go back before the next read (`hand_back`), in order.
        self.disturbed = False
        self._ordered = ordered
        self._backlog: list[tuple[str, dict[bytes, bytes], int]] = []
        self._connection = connection
        self._keys = keys
        self._settling = keys.settling()
        self._topic = topic
        self._codec = codec
        self._clock = clock
        timeout = settings.ack_timeout
        self._deadline = timeout
        self._limits = [
            int(timeout * 1000) if timeout is not None else 0, settings.max_delivery_attempts,
            settings.dead_letter_limit or 0,
        ]
        self._reclaim_every = RECLAIM_EVERY if timeout is None else min(RECLAIM_EVERY, timeout / 4)
        self._next_reclaim = 0.0
        self._next_trim = 0.0
        self._batch_acks = batch_acks
        self._deferred: list[RedisDelivery[Any]] = []
        self._deferred_since = 0.0
        self._lock = threading.Lock()
        self._released = False

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, group={self.group!r})"

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]:
        """Up to ``count`` deliveries: reclaimed ones first when a look is due, else new
        ones, waiting up to ``block`` seconds for them (None: do not wait).

        An entry that cannot be decoded is dead-lettered ``error`` here, never returned.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        now = self._clock()
        entries: list[tuple[str, dict[bytes, bytes], int]] = []
        if self._backlog:
            entries, self._backlog = self._backlog[:count], self._backlog[count:]
        elif now >= self._next_reclaim:
            self._next_reclaim = now + self._reclaim_every
            entries = self._reclaim(count)
            if self._ordered and len(entries) >= count:
                self._next_reclaim = 0.0  # more may wait: read them before new ones
        if now >= self._next_trim:
            self._next_trim = now + TRIM_EVERY
            self._connection.run("TRIM", [self._keys.stream, self._keys.groups], [])
        if not entries:
            entries = self._read_new(count, block)
        received = self._clock()
        deliveries = []
        others: list[str] = []
        for entry_id, fields, attempt in entries:
            message_id = message_id_of(self.partition, entry_id)
            if b"o" in fields:  # a replay, meant for one group only
                if fields[b"o"].decode() != self.group:
                    others.append(entry_id)
                    continue
                message_id = fields[b"r"].decode()
            try:
                message, key, attributes = self._codec.message(message_id, fields)
            except UndecodableError as exc:
                self._refuse(entry_id, attempt, str(exc))
                continue
            deliveries.append(RedisDelivery(
                self, message, message_id, self._topic, self.subscriber_id, self.group, key,
                attributes, attempt, received, entry_id, self.partition))
        if others:
            with self._connection.guard():
                self._connection.client.xack(self._keys.stream, self.group, *others)
        return deliveries

    def expired(self, delivery: RedisDelivery[Any]) -> bool:
        """Whether ``delivery`` waited in the member's batch for half its ack deadline
        (Redis counts the deadline from the read): too late to start it safely. The
        member gives it and the rest of its batch back (`give_back`)."""
        deadline = self._deadline
        if deadline is not None and self._clock() - delivery.received >= deadline / 2:
            self.disturbed = True
            return True
        return False

    def give_back(self, deliveries: list[RedisDelivery[Any]]) -> None:
        """Hand ``deliveries`` (read, never started) back to the group with no attempt
        counted, each only while this consumer still holds it at that attempt; the next
        `read` looks for them first.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        held = [d for d in deliveries if d.pending]
        if held:
            self._connection.run("GIVE_BACK", [self._keys.stream], [
                self.group, self.name,
                *(value for d in held for value in (d.entry_id, d.attempt))])
        self.reclaim_soon()

    def reclaim_soon(self) -> None:
        """Look for handed-back deliveries at the next `read` (after a nack)."""
        self._next_reclaim = 0.0

    def take_over(self) -> int:
        """Claim every delivery of the partition that another consumer holds (its owner's
        lease ran out, or it handed them back), oldest first, to be read before any new
        entry. Returns how many.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        self._backlog += self._reclaim(1_000_000, takeover=True)
        self.reclaim_soon()
        return len(self._backlog)

    def hand_back(self) -> None:
        """Send the queued acks, then hand back every delivery this consumer still holds
        (no attempt counted), so the next `read` reclaims them in order.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        self.flush()
        self._connection.run("RELEASE", self._settling,
                             [self.group, self.name, "", *self._limits[1:]])
        self.disturbed = False
        self.reclaim_soon()

    def _reclaim(self, count: int, *, takeover: bool = False,
                 ) -> list[tuple[str, dict[bytes, bytes], int]]:
        found = self._connection.run(
            "RECLAIM", self._settling,
            [self.group, self.name, *self._limits, count, "t" if takeover else ""])
        entries = []
        for entry_id, flat, attempt in found:
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            entries.append((entry_id.decode(), fields, int(attempt)))
        return entries

    def _read_new(self, count: int, block: float | None) -> list[tuple[str, dict[bytes, bytes], int]]:
        """XREADGROUP, in one round trip with the acks queued so far (they settle first)."""
        with self._lock:
            deferred, self._deferred = self._deferred, []
        batch = self._connection.batch()
        if deferred:
            batch.script("SETTLE", self._settling, self._ack_args(deferred))
        batch.command("xreadgroup", self.group, self.name, {self._keys.stream: ">"}, count=count,
                      block=None if block is None else max(int(block * 1000), 1))
        try:
            replies = batch.execute()
        except BackendUnavailableError:
            with self._lock:
                self._deferred[:0] = deferred
            raise
        if deferred:
            self._verdicts(deferred, [v.decode() for v in replies[0]])
        reply = replies[-1]
        if not reply:
            return []
        return [(entry_id.decode(), fields, 1) for entry_id, fields in reply[0][1]]

    def _refuse(self, entry_id: str, attempt: int, error: str) -> None:
        logger.warning("topic %s: dead-lettering entry %s of group %s: %s", self._topic,
                       entry_id, self.group, error)
        self._call_nack((entry_id, attempt, "x", "error", optional(error), "", ""))

    def settle(self, delivery: RedisDelivery[Any], kind: str, reason: str, error: str | None,
               exception: str | None, traceback: str | None) -> str:
        """Settle one delivery now; the fence's verdict (``ok`` when it was still ours).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        if self._released:
            return "closed"
        if kind == "a":
            return self._call(self._ack_args([delivery]))[0]
        self.disturbed = True
        self.reclaim_soon()
        return self._call_nack((delivery.entry_id, delivery.attempt, kind, reason,
                                optional(error), optional(exception), optional(traceback)))

    def defer_ack(self, delivery: RedisDelivery[Any]) -> bool:
        """Queue an ack for `flush` when this batches acks and its deadline is far."""
        if self._released or not self._batch_acks or (
                self._deadline is not None
                and self._clock() - delivery.received > self._deadline / 2):
            return False
        with self._lock:
            if not self._deferred:
                self._deferred_since = self._clock()
            self._deferred.append(delivery)
        return True

    def flush(self, *, due_only: bool = False) -> None:
        """Send the queued acks in one call (with ``due_only``, only once the oldest waited
        `FLUSH_AFTER`). One that Redis had taken back meanwhile is logged and marked so.

        Raises:
            BackendUnavailableError: Redis did not answer (the acks stay queued).
        """
        if not self._deferred or (  # read without the lock: a stale look only delays
                due_only and self._clock() - self._deferred_since < FLUSH_AFTER):
            return
        with self._lock:
            deferred, self._deferred = self._deferred, []
        if not deferred:
            return
        try:
            verdicts = self._call(self._ack_args(deferred))
        except BackendUnavailableError:
            with self._lock:
                self._deferred[:0] = deferred
            raise
        self._verdicts(deferred, verdicts)

    def _verdicts(self, deferred: list[RedisDelivery[Any]], verdicts: list[str]) -> None:
        for delivery, verdict in zip(deferred, verdicts, strict=True):
            if verdict != "ok":
                delivery.taken_back(verdict)
                logger.warning("topic %s: ack of %s by group %s came after Redis took it "
                               "back (%s)", self._topic, delivery.message_id, self.group, verdict)

    def release(self, running: str = "") -> tuple[int, int]:
        """Hand every delivery this consumer holds back to its group and retire it.

        ``running`` names the delivery a crashed process was running: that one counts as
        an attempt (``worker_crashed``); the others go back with no attempt counted.
        Returns (deliveries handed back, 1 if ``running`` was among them).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        try:
            self.flush()
        except BackendUnavailableError:
            logger.warning("topic %s: acks of %s lost with Redis; they will be redelivered",
                           self._topic, self.name)
        self._released = True
        held, crashed = self._connection.run(
            "RELEASE", self._settling,
            [self.group, self.name, running, *self._limits[1:]])
        return int(held), int(crashed)

    def _header(self) -> list[Any]:
        return [self.group, self.name, self.subscriber_id, *self._limits]

    def _ack_args(self, deliveries: list[RedisDelivery[Any]]) -> list[Any]:
        args = self._header()
        args.append(len(deliveries))
        for delivery in deliveries:
            args += (delivery.entry_id, delivery.attempt)
        args.append(0)
        return args

    def _call_nack(self, item: tuple[str, int, str, str, str, str, str]) -> str:
        return self._call([*self._header(), 0, 1, *item])[0]

    def _call(self, args: list[Any]) -> list[str]:
        return [v.decode() for v in self._connection.run("SETTLE", self._settling, args)]
