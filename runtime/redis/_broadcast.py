"""A broadcast reader: a consumer group of its own on the stream, from where it subscribed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from runtime.core._settings import TopicSettings
from runtime.redis._connection import Connection
from runtime.redis._consumer import consumer_name
from runtime.redis._delivery import RedisDelivery
from runtime.redis._keys import TopicKeys, message_id_of
from runtime.redis._records import Codec, UndecodableError, optional

__all__ = ["READER_PREFIX", "REAP_EVERY", "BroadcastReader", "Reaper"]

logger = logging.getLogger("runtime")

READER_PREFIX = "broadcast:"
"""How a reader's consumer group is named (then a consumer name no other process uses)."""
REAP_EVERY = 0.25
"""Seconds between one process's looks for readers presumed gone at most (a quarter of
``ack_timeout`` when that is shorter): how late a gone reader's share is released."""


class Reaper:
    """Releases the share of broadcast readers presumed gone, and readers' deliveries held
    past the ack deadline (each at most every `REAP_EVERY`), from any process.

    A reader is presumed gone once it has not read from Redis for ``ack_timeout``
    seconds (it crashed, or stopped reading): its share of every message it was counted
    for and has not settled completes as a nack ``timeout``. With ``ack_timeout=None``
    nothing is presumed, and a gone reader's share stays pending (visible in stats).

    Args:
        connection: the bus's connection.
        parts: the keys of the partitions it looks at (one script call each).
        settings: the topic's settings (ack deadline, dead-letter bound).
        clock: the time source of the period.
    """

    def __init__(self, connection: Connection, parts: Sequence[TopicKeys],
                 settings: TopicSettings, clock: Callable[[], float] = time.monotonic) -> None:
        timeout = settings.ack_timeout
        self._connection = connection
        self._keys = [[*part.settling(), part.readers] for part in parts]
        self._args = (None if timeout is None
                      else [max(int(timeout * 1000), 1), settings.dead_letter_limit or 0])
        self._every = REAP_EVERY if timeout is None else min(REAP_EVERY, timeout / 4)
        self._clock = clock
        self._lock = threading.Lock()
        self._next = 0.0

    def due(self) -> None:
        """Reap when a look is due (never with ``ack_timeout=None``).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        if self._args is None:
            return
        with self._lock:
            now = self._clock()
            if now < self._next:
                return
            self._next = now + self._every
        for keys in self._keys:  # one slot at a time (a Redis Cluster refuses more)
            self._connection.run("READER_REAP", keys, self._args)


class BroadcastReader:
    """Reads every entry published after it attached, at its own pace.

    Attached, it is in the topic's ``readers`` (with when it last read: each read says so)
    and has a consumer group of its own created at the stream's end in the same script,
    so every publish from then on
    counts it as a destination: the message stays pending, and its outcome waits, until
    this reader settled its share. An ack or nack is one script call (a nack writes a dead
    letter; a reader never redelivers); detaching settles its share of what it holds or
    has not read as a nack ``unsubscribed``. Other processes presume it gone, and release
    its share, after ``ack_timeout`` without a read (`Reaper`); it then attaches anew
    (from the stream's end) at its next read, with a warning.

    Args:
        connection: the bus's connection.
        keys: the topic's keys.
        topic: the topic's name.
        subscriber_id: its subscription id.
        settings: the topic's settings.
        codec: decodes entries.
        clock: its time source (ack deadlines, reap periods).
        partition: the partition ``keys`` belong to.
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, subscriber_id: int,
                 settings: TopicSettings, codec: Codec,
                 clock: Callable[[], float] = time.monotonic, partition: int = 0) -> None:
        self.subscriber_id = subscriber_id
        self._partition = partition
        self._connection = connection
        self._keys = keys
        self._settling = keys.settling()
        self._topic = topic
        self._codec = codec
        self._deadline = settings.ack_timeout
        self._limit = settings.dead_letter_limit or 0
        self._clock = clock
        self._reaper = Reaper(connection, [keys], settings, clock)
        self._lock = threading.Lock()
        self.name = READER_PREFIX + consumer_name(subscriber_id)
        self._attach(self.name)

    def _attach(self, name: str, *, anew: bool = False) -> bool:
        """Join the readers as ``name``; False (``anew``) when the stream is gone."""
        return bool(self._connection.run("ATTACH", [self._keys.stream, self._keys.readers],
                                         [name, "anew" if anew else ""]))

    def detach(self) -> None:
        """Leave the topic's readers: its share of what it holds or has not read settles
        as a nack ``unsubscribed`` (later settlements of its deliveries are refused).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        self._connection.run("READER_DETACH", [*self._settling, self._keys.readers],
                             [self.name])

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]:
        """Up to ``count`` entries after the cursor, waiting ``block`` seconds for one.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        self._reaper.due()
        with self._lock:
            name = self.name
            batch = self._connection.batch()  # "I read now", and the read, in one round trip
            batch.script("READER_TOUCH", [self._keys.readers], [name])
            batch.command("xreadgroup", name, name, {self._keys.stream: ">"}, count=count,
                          block=None if block is None else max(int(block * 1000), 1))
            try:
                reply = batch.execute()[1]
            except redis.ResponseError as exc:
                # Its group was dropped by a reap; a stream that is gone was destroyed,
                # and attaching anew must not bring its keys back.
                if "NOGROUP" not in str(exc):
                    raise
                renamed = READER_PREFIX + consumer_name(self.subscriber_id)
                if not self._attach(renamed, anew=True):
                    raise
                logger.warning("topic %s: broadcast subscriber %d was presumed gone (no read "
                               "for ack_timeout) and reads on from now", self._topic,
                               self.subscriber_id)
                self.name = renamed
                return []
        if not reply:
            return []
        received = self._clock()
        deliveries: list[RedisDelivery[Any]] = []
        replays: list[bytes] = []
        for raw_id, fields in reply[0][1]:
            if b"o" in fields:  # a replay, meant for one group: readers were not counted
                replays.append(raw_id)
                continue
            entry_id = raw_id.decode()
            message_id = message_id_of(self._partition, entry_id)
            try:
                message, key, attributes = self._codec.message(message_id, fields)
            except UndecodableError as exc:
                self._call(entry_id, "x", "error", optional(str(exc)), "", "")
                continue
            deliveries.append(RedisDelivery(self, message, message_id, self._topic,
                                            self.subscriber_id, None, key, attributes, 1,
                                            received, entry_id, self._partition))
        if replays:
            with self._connection.guard():
                self._connection.client.xack(self._keys.stream, name, *replays)
        return deliveries

    def flush(self, *, due_only: bool = False) -> None:
        """Nothing waits: a reader settles each delivery as it happens."""

    def expired(self, delivery: RedisDelivery[Any]) -> bool:
        """Whether ``delivery``'s ack deadline passed while it waited in the batch (such a
        delivery is never started; the next reap times it out)."""
        deadline = self._deadline
        return deadline is not None and self._clock() - delivery.received >= deadline

    def give_back(self, deliveries: list[RedisDelivery[Any]]) -> None:
        """Nothing: broadcast never redelivers; what a reader let expire unstarted is
        timed out by the next reap, as a reader that hangs."""

    def defer_ack(self, delivery: RedisDelivery[Any]) -> bool:
        """Never: a reader's ack is sent at once."""
        return False

    def settle(self, delivery: RedisDelivery[Any], kind: str, reason: str, error: str | None,
               exception: str | None, traceback: str | None) -> str:
        """Settle this reader's share of the message; a nack dead-letters it. The fence's
        verdict: ``ok``, or ``taken`` once the reader no longer holds it.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        return self._call(delivery.entry_id, kind, reason, optional(error),
                          optional(exception), optional(traceback))

    def _call(self, entry_id: str, kind: str, reason: str, error: str, exception: str,
              traceback: str) -> str:
        verdict = self._connection.run(
            "READER_SETTLE", self._settling,
            [self.name, self.subscriber_id, self._limit, entry_id, kind, reason, error,
             exception, traceback])
        return str(verdict.decode() if isinstance(verdict, bytes) else verdict)
