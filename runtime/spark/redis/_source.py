"""The streaming source on a Redis topic: a Spark query as one consumer of a group.

The query is the consumer ``consumer`` of the topic's consumer group ``group``, and that
consumer's pending entries are its lease log. An offset names, per topic partition, the
last entry id a batch reaches: ``{"ids": [id per partition], "from": [id or "" per
partition], "redis": [url, topic, group, consumer]}``. A batch is, per partition, this
consumer's pending entries after the start offset's id up to the end offset's; where the
batch took every stream entry after id ``from`` up to its end (it held nothing there
before and skipped no replay meant for another group), those are exactly that stretch
of the stream, read without looking up what the consumer holds. Where each call runs:

- driver runner: ``latestOffset`` moves new entries into the consumer's pending list
  (one script per partition, all sent together, each answering only the last id, a
  count and ``from``: no payload reaches the driver), then acks the committed batch before them
  through the settle script's bookkeeping (outcomes, stats, the settled records) on a
  thread of its own while the executors read; ``stop`` acks the last committed batch;
- executors: ``read``, one task per topic partition, reads its range of pending entries
  and changes nothing, so a retried task, or the same batch planned again after a driver
  restart (Spark replays the batch from its offset log), reads the same entries;
- the user's driver process: the progress listener acks the last committed batch (see
  `runtime.spark._listener`), as for the broker's source.

At least once: an entry is acked only below an offset Spark committed. A run that stops
before its batch was committed leaves the batch pending for this consumer, and the next
run reads it again first. Entries the group's other members take over after the topic's
``ack_timeout`` are theirs; a batch that outlasts ``ack_timeout`` on a topic with other
members may therefore be read twice (warned at the ack).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from runtime.core._settings import TopicSettings
from runtime.errors import BackendUnavailableError
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys
from runtime.spark._options import RedisSourceOptions
from runtime.spark._source import read_limit, rows_of
from runtime.spark.redis._rows import HeldSlice, Limits, held_batch, held_slice, taken_slice

__all__ = ["HeldRange", "RedisStreamReader", "ack_through", "redis_offset_name"]

logger = logging.getLogger(__name__)
REDIS_FIELD = "redis"
FIRST_ID = "0-0"
# Most entries one partition adds to a batch when Spark sets no limit: bounds the planning
# script's run and one task's range (a larger backlog takes several batches).
UNLIMITED_ROWS = 1_000_000
# Entries per executor read and per Arrow batch handed to Spark.
SLICE_ROWS = 20_000
# Entries one ack call settles (~12 ms of Redis): the executors' reads run between calls.
ACK_CHUNK = 10_000


def redis_offset_name(options: RedisSourceOptions) -> list[Any]:
    """What an offset names besides its ids: [url, topic, group, consumer]. The URL is
    None when it holds a password (offsets are kept in checkpoints): the progress
    listener then leaves the last batch to the query's next run."""
    url = options.redis if "@" not in options.redis else None
    return [url, options.topic, options.group, options.consumer]


def ack_through(connection: Connection, topic: str, group: str, consumer: str,
                ids: Sequence[str], ack_timeout: float | None) -> tuple[int, int]:
    """Ack ``consumer``'s pending entries up to ``ids[p]`` in each partition ``p``;
    returns (acked, of those held past ``ack_timeout``).

    Raises:
        BackendUnavailableError: Redis did not answer.
    """
    timeout = 0 if ack_timeout is None else int(ack_timeout * 1000)
    acked = late = 0
    for partition, last in enumerate(ids):
        keys = TopicKeys.of(topic, partition)
        settled = 0
        while True:
            done, overdue = (int(n) for n in connection.run(
                "ACK_THROUGH", keys.settling(), [group, consumer, last, timeout, ACK_CHUNK]))
            settled, late = settled + done, late + overdue
            if done < ACK_CHUNK:
                break
        if settled:
            connection.run("TRIM", [keys.stream, keys.groups], [])
        acked += settled
    return acked, late


class HeldRange(InputPartition):
    """Topic partition ``partition``'s entries after id ``after`` up to ``upto``: every
    stream entry after ``start`` up to ``upto`` when ``start`` is set (the batch took them
    all), else those this consumer holds."""

    def __init__(self, partition: int, after: str, upto: str, start: str = "") -> None:
        super().__init__((partition, after, upto, start))
        self.partition = partition
        self.after = after
        self.upto = upto
        self.start = start


class RedisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a Redis topic's group as the consumer ``consumer`` (see the module).

    Args:
        options: the parsed options.
        schema: Spark's schema of the rows.
        settings: the topic's recorded settings (its partitions, deadline, attempts).
    """

    def __init__(self, options: RedisSourceOptions, schema: StructType,
                 settings: TopicSettings) -> None:
        self.options = options
        self.schema = schema
        self.settings = settings
        self._connection: Connection | None = None
        self._available_now = False
        # Under availableNow: each partition's last id and entries-added when planned first.
        self._targets: list[tuple[str, int]] | None = None
        self._name = redis_offset_name(options)
        # The last committed end, and the ack of a committed batch that runs while the
        # next batch is read (one thread, made by the first plan, ended by `stop`).
        self._committed: list[str] | None = None
        self._acker: ThreadPoolExecutor | None = None
        self._acking: Future[None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy: never a connection.
        return {"options": self.options, "schema": self.schema, "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["schema"], state["settings"])  # type: ignore[misc]

    def initialOffset(self) -> dict[str, Any]:
        """The start of every partition: a fresh query first reads what the consumer
        still holds (what an earlier run never committed), then new entries."""
        return self._offset([FIRST_ID] * self.settings.partitions,
                            [""] * self.settings.partitions)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_messages_per_batch`` as Spark's admission control."""
        return read_limit(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """End this run at what the partitions hold when its first batch is planned."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Take the next batch's entries, then ack ``start`` in the background (its batch
        is committed: Spark plans the next batch only after the previous one's commit-log
        entry): the executors read while Redis acks."""
        first = self._ids(start)
        self._await_ack()
        connection = self._connect()
        streams = [TopicKeys.of(self.options.topic, p).stream for p in range(len(first))]
        if self._available_now and self._targets is None:
            self._targets = [(last.decode(), int(added)) for last, added in connection.pipelined(
                "STREAM_END", [([stream], []) for stream in streams])]
        targets = self._targets or [("", 0)] * len(first)
        total = self._rows(limit)
        share = UNLIMITED_ROWS if total is None else max(1, math.ceil(total / len(first)))
        ends, counts, taken = self._take(connection, streams, first, targets,
                                         [share] * len(first))
        spare = 0 if total is None else total - sum(counts)
        full = [p for p, count in enumerate(counts) if count >= share]
        if spare > 0 and full:
            # What partitions that ran short left of the limit goes to those that did not
            more = [math.ceil(spare / len(full)) if p in full else 0 for p in range(len(first))]
            middle = ends
            ends, added, began = self._take(connection, streams, middle, targets, more)
            for p, count in enumerate(added):
                if count and began[p] != middle[p]:  # others read between the two takes
                    taken[p] = ""
        if self._acker is None:
            self._acker = ThreadPoolExecutor(1, "actorbus-redis-ack")
        self._acking = self._acker.submit(self.ack, first)
        if ends == first:  # nothing new: the same offset, so Spark plans no batch
            return start
        return self._offset(ends, taken)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One read task per topic partition whose range is not empty.

        Raises:
            ValueError: the offsets name another partition count than the topic has.
        """
        first, last, starts = self._ids(start), self._ids(end), self._starts(end)
        return [HeldRange(p, a, b, s) for p, (a, b, s) in enumerate(zip(first, last, starts, strict=True))
                if a != b]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: acked by the next plan, or by `stop`."""
        self._committed = self._ids(end)

    def ack(self, ids: Sequence[str]) -> None:
        """Ack up to ``ids``; warn about entries held past the topic's ``ack_timeout``."""
        _, late = ack_through(self._connect(), self.options.topic, self.options.group,
                              self.options.consumer, ids, self.settings.ack_timeout)
        if late:
            logger.warning(
                "actorbus source %s/%s: %d entries were acked after the topic's ack_timeout; "
                "other members of the group may have taken them first (raise ack_timeout, "
                "or make batches shorter)", self.options.topic, self.options.group, late)

    def stop(self) -> None:
        """Ack what was committed, then disconnect; what is not committed stays pending
        for this consumer."""
        self._await_ack()
        acker, self._acker = self._acker, None
        if acker is not None:
            acker.shutdown()
        try:
            if self._committed is not None:
                self.ack(self._committed)
        except BackendUnavailableError as exc:  # the next run acks it first
            logger.warning("actorbus source %s/%s: the last batch stays pending: %s",
                           self.options.topic, self.options.group, exc)
        finally:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the range's entries, as Arrow batches of at most `SLICE_ROWS` rows."""
        assert isinstance(partition, HeldRange)
        connection = self.options.connect()
        try:
            yield from read_held(connection, self.options, self.settings, self.schema, partition)
        finally:
            connection.close()

    def _await_ack(self) -> None:
        """Wait for the background ack; one that failed is retried by the next (each
        acks everything up to its offset)."""
        acking, self._acking = self._acking, None
        if acking is None:
            return
        try:
            acking.result()
        except BackendUnavailableError as exc:
            logger.warning("actorbus source %s/%s: an ack did not reach Redis (retried with "
                           "the next batch): %s", self.options.topic, self.options.group, exc)

    def _connect(self) -> Connection:
        if self._connection is None:
            self._connection = self.options.connect()
        return self._connection

    def _rows(self, limit: ReadLimit) -> int | None:
        """Entries a batch may hold (None: no bound)."""
        rows = rows_of(limit)
        cap = self.options.max_messages_per_batch
        return min(rows, cap) if rows and cap else rows or cap

    def _take(self, connection: Connection, streams: list[str], after: list[str],
              targets: list[tuple[str, int]], rows: list[int],
              ) -> tuple[list[str], list[int], list[str]]:
        """Take up to ``rows[p]`` entries past ``after[p]`` into this consumer's pending
        list in each partition ``p`` (one round trip; none where ``rows[p]`` is 0); the
        last id each reaches, how many it took, and the id after which it took every
        entry of the stream ("" where it did not: see the module)."""
        calls = [p for p, count in enumerate(rows) if count]
        replies = connection.pipelined("TAKE_RANGE", [
            ([streams[p]], [self.options.group, self.options.consumer, after[p], rows[p],
                            *targets[p]]) for p in calls])
        ends, counts, starts = list(after), [0] * len(after), [""] * len(after)
        for p, (last, count, start) in zip(calls, replies, strict=True):
            ends[p], counts[p], starts[p] = last.decode(), int(count), start.decode()
        return ends, counts, starts

    def _ids(self, offset: dict[str, Any]) -> list[str]:
        ids = [str(i) for i in offset["ids"]]
        if len(ids) != self.settings.partitions:
            raise ValueError(
                f"actorbus source {self.options.topic}: the checkpoint's offsets name "
                f"{len(ids)} partitions, the topic has {self.settings.partitions}")
        return ids

    def _starts(self, offset: dict[str, Any]) -> list[str]:
        """Each partition's ``from`` (all "" in a checkpoint written before it existed)."""
        return [str(i) for i in offset.get("from") or [""] * self.settings.partitions]

    def _offset(self, ids: list[str], starts: list[str]) -> dict[str, Any]:
        return {"ids": ids, "from": starts, REDIS_FIELD: self._name}


def read_held(connection: Connection, options: RedisSourceOptions, settings: TopicSettings,
              schema: StructType, partition: HeldRange) -> Iterator[pa.RecordBatch]:
    """The pending entries of ``partition``'s range, slice by slice. While Spark takes
    one slice, a thread of the task reads the next: Redis's work and the task's overlap."""
    keys = TopicKeys.of(options.topic, partition.partition)
    limits = Limits.of(settings, keys, options.group, options.consumer)
    reader = connection.plain_reader(keys.stream)

    def fetch(after: str) -> HeldSlice | None:
        with connection.guard():
            if partition.start:
                return taken_slice(reader, keys.stream, after, partition.upto, SLICE_ROWS)
            return held_slice(reader, keys.stream, options.group, options.consumer, after,
                              partition.upto, SLICE_ROWS)

    with ThreadPoolExecutor(1, "actorbus-redis-read") as prefetch:
        held = fetch(partition.start or partition.after)
        while held is not None:
            following = prefetch.submit(fetch, held.last) if held.last != partition.upto else None
            batch = held_batch(held, limits, connection, schema)
            if batch.num_rows:
                yield batch
            if following is None:
                return
            held = following.result()
