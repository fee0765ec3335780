"""A broadcast reader: its own cursor on the stream, from where it subscribed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from runtime.redis._connection import Connection
from runtime.redis._delivery import RedisDelivery
from runtime.redis._keys import TopicKeys, message_id_of
from runtime.redis._records import Codec, UndecodableError, optional

__all__ = ["BroadcastReader"]


class BroadcastReader:
    """Reads every entry published after it attached, at its own pace (no group).

    Registered in the topic's ``readers`` set while attached, so a publish with no group
    still has a destination. Its acks stay local (Redis keeps no per-reader books); a
    nack writes a dead letter.

    Args:
        connection: the bus's connection.
        keys: the topic's keys.
        topic: the topic's name.
        subscriber_id: its subscription id.
        dead_letter_limit: the dead-letter stream's bound (None: unbounded).
        codec: decodes entries.
        partition: the partition ``keys`` belong to.
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, subscriber_id: int,
                 dead_letter_limit: int | None, codec: Codec,
                 clock: Callable[[], float] = time.monotonic, partition: int = 0) -> None:
        self.subscriber_id = subscriber_id
        self._partition = partition
        self.name = f"{topic}:{subscriber_id}:{id(self):x}"
        self._connection = connection
        self._keys = keys
        self._topic = topic
        self._codec = codec
        self._limit = dead_letter_limit or 0
        self._clock = clock
        self._lock = threading.Lock()
        # One script: a publish lands either before the cursor (and sees no reader) or
        # after it (and counts this reader).
        self._cursor = connection.run("ATTACH", [keys.stream, keys.readers], [self.name]).decode()

    def detach(self) -> None:
        """Leave the topic's readers."""
        with self._connection.guard():
            self._connection.client.srem(self._keys.readers, self.name)

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]:
        """Up to ``count`` entries after the cursor, waiting ``block`` seconds for one.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        with self._lock, self._connection.guard():
            reply = self._connection.client.xread(
                {self._keys.stream: self._cursor}, count=count,
                block=None if block is None else max(int(block * 1000), 1))
            if not reply:
                return []
            entries = reply[0][1]
            self._cursor = entries[-1][0].decode()
        received = self._clock()
        deliveries = []
        for raw_id, fields in entries:
            entry_id = raw_id.decode()
            message_id = message_id_of(self._partition, entry_id)
            try:
                message, key, attributes = self._codec.message(message_id, fields)
            except UndecodableError as exc:
                self._bury(entry_id, fields, "error", str(exc), None, None)
                continue
            deliveries.append(RedisDelivery(self, message, message_id, self._topic,
                                            self.subscriber_id, None, key, attributes, 1,
                                            received, entry_id, self._partition))
        return deliveries

    def flush(self, *, due_only: bool = False) -> None:
        """Nothing to send: a reader's acks stay local."""

    def expired(self, delivery: RedisDelivery[Any]) -> bool:
        """A reader's deliveries have no deadline."""
        return False

    def defer_ack(self, delivery: RedisDelivery[Any]) -> bool:
        """A reader's ack needs no call (and none is ever taken back)."""
        return True

    def settle(self, delivery: RedisDelivery[Any], kind: str, reason: str, error: str | None,
               exception: str | None, traceback: str | None) -> str:
        """A nack dead-letters the entry (a reader never redelivers)."""
        if kind != "a":
            with self._connection.guard():
                found = self._connection.client.xrange(self._keys.stream, delivery.entry_id,
                                                       delivery.entry_id)
            fields = found[0][1] if found else {}
            self._bury(delivery.entry_id, fields, reason, error, exception, traceback)
        return "ok"

    def _bury(self, entry_id: str, fields: dict[bytes, bytes], reason: str, error: str | None,
              exception: str | None, traceback: str | None) -> None:
        record: list[Any] = ["m", entry_id, "g", "", "s", self.subscriber_id, "r", reason,
                             "e", optional(error), "n", 1, "x", optional(exception),
                             "t", optional(traceback)]
        for name, value in fields.items():
            record += [name, value]
        self._connection.run("BURY", [self._keys.dead, self._keys.stats], [self._limit, *record])
