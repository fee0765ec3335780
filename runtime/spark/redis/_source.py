"""The streaming source on a Redis topic: a Spark query as one consumer of a group.

The query is the consumer ``consumer`` of the topic's consumer group ``group``, and that
consumer's pending entries are its lease log. An offset names, per topic partition, where
a batch starts (``after``) and either the last entry id it reaches (``ids``) or, where its
read task takes the entries itself, how many it takes (``take``: the count, and the
group's read counter at ``after``; ``ids`` is then ""). Where each call runs:

- driver runner: ``latestOffset`` asks each partition where the group stands (one small
  script per partition, all sent together: no entry reaches the driver) and plans a
  count of new entries past the group's last delivered id; it then acks the committed
  batch before them through the settle script's bookkeeping (outcomes, stats, the
  settled records) on a thread of its own while the executors read; ``stop`` acks the
  last committed batch;
- executors: ``read``, one task per topic partition. A task that takes its entries sets
  the group back to ``after`` and reads ``take`` entries with XREADGROUP, in one MULTI
  per slice: each slice names where it starts, so a retried task, a second attempt
  beside it, or the same batch planned again after a driver restart (Spark replays the
  batch from its offset log) takes the same entries. The task then records where it
  ended (the ``takes`` hash of the partition), which is where the next batch starts and
  what its ack reaches; a task that finds the record reads the entries held there. The
  next plan records where a committed batch ended in the same hash, and each slice's
  MULTI is fenced on it (a watched read): an attempt that goes on past that takes
  nothing, so it never sets the group back behind a committed batch;
- the user's driver process: the progress listener acks the last committed batch (see
  `runtime.spark._listener`), as for the broker's source.

The tasks take the entries only while the query is the group's only consumer: a task
that sets the group back would hand another member's entries to the query. Where the
group has other consumers, where this consumer still holds entries past a batch's start
(a run that stopped before its batch was committed), or where Redis lost the group's
read counter, the driver takes the batch itself: ``TAKE_RANGE`` moves the held entries,
then new ones, into the consumer's pending list and answers the last id; ``from`` then
names the id after which the batch took every stream entry ("" where it did not: it held
something there before, or skipped a replay meant for another group), so the tasks read
that stretch with XRANGE alone, else they look up what the consumer holds.

At least once: an entry is acked only below an offset Spark committed. A run that stops
before its batch was committed leaves the batch pending for this consumer, and the next
run reads it again first. Entries the group's other members take over after the topic's
``ack_timeout`` are theirs; a batch that outlasts ``ack_timeout`` on a topic with other
members may therefore be read twice (warned at the ack).
"""

from __future__ import annotations

import json
import logging
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
from runtime.spark.redis._rows import (
    HeldSlice,
    Limits,
    held_batch,
    held_slice,
    own_entries,
    taken_slice,
)

__all__ = ["HeldRange", "RedisStreamReader", "TakenRange", "ack_through", "redis_offset_name",
           "resolved_ends"]

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
    """Ack ``consumer``'s pending entries up to ``ids[p]`` in each partition ``p``, and
    forget the consumer's takes that end before it; returns (acked, of those held past
    ``ack_timeout``).

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
        _forget_takes(connection, keys, group, consumer, last)
        acked += settled
    return acked, late


def resolved_ends(connection: Connection, topic: str, group: str, consumer: str,
                  offset: dict[str, Any]) -> list[str]:
    """The last id an offset reaches in each partition: where a read task took the
    batch, the end it recorded (the start where there is no record: the batch was not
    read, or was acked and forgotten since).

    Raises:
        BackendUnavailableError: Redis did not answer.
    """
    ids = [str(i) for i in offset["ids"]]
    takes = offset.get("take") or [None] * len(ids)
    taking = [p for p, take in enumerate(takes) if take]
    if not taking:
        return ids
    batch = connection.batch()
    for p in taking:
        batch.command("hget", TopicKeys.of(topic, p).takes,
                      _take_field(group, consumer, str(offset["after"][p]), int(takes[p][0])))
    for p, record in zip(taking, batch.execute(), strict=True):
        ids[p] = str(offset["after"][p]) if record is None else _recorded(record)[0]
    return ids


def _take_field(group: str, consumer: str, after: str, rows: int) -> str:
    """The ``takes`` field of one batch's take: the consumer's, past ``after``."""
    return json.dumps([group, consumer, after, rows])


def _committed_field(group: str, consumer: str) -> str:
    """The ``takes`` field of where the consumer's last committed batch ended: no read
    task of a batch that starts before it takes anything (see `read_taken`)."""
    return json.dumps([group, consumer, "committed"])


def _recorded(record: bytes) -> tuple[str, bool]:
    """A take's record: where it ended, and whether it took every entry on the way."""
    end, _, whole = record.decode().partition(" ")
    return end, whole == "whole"


def _forget_takes(connection: Connection, keys: TopicKeys, group: str, consumer: str,
                  last: str) -> None:
    """Drop the consumer's take records (and the marks of entries its read tasks
    dead-lettered) that end before ``last``: acked, no batch starts or ends there any
    more. The record of the batch ending at ``last`` stays: the progress listener may ack
    it after the plan did; so does where the last committed batch ended."""
    with connection.guard():
        records = connection.client.hgetall(keys.takes)
        done = [field for field, record in records.items()
                if json.loads(field)[:2] == [group, consumer]
                and field.decode() != _committed_field(group, consumer)
                and _order(_recorded(record)[0]) < _order(last)]
        if done:
            connection.client.hdel(keys.takes, *done)


def _order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair."""
    millis, _, sequence = entry_id.partition("-")
    return int(millis), int(sequence or 0)


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


class TakenRange(InputPartition):
    """Topic partition ``partition``'s next ``rows`` entries after id ``after``, where the
    group's read counter is ``read``: the read task takes them (see the module)."""

    def __init__(self, partition: int, after: str, rows: int, read: int) -> None:
        super().__init__((partition, after, rows, read))
        self.partition = partition
        self.after = after
        self.rows = rows
        self.read = read


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
        self._committed: dict[str, Any] | None = None
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
        first = [FIRST_ID] * self.settings.partitions
        return self._offset(first, first, [""] * self.settings.partitions)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_messages_per_batch`` as Spark's admission control."""
        return read_limit(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """End this run at what the partitions hold when its first batch is planned."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Plan the next batch, then ack ``start`` in the background (its batch is
        committed: Spark plans the next batch only after the previous one's commit-log
        entry): the executors read while Redis acks.

        Raises:
            InvalidSettingsError: naming ``topic`` or ``group``, the one that is gone
                (destroyed or deleted while the query ran).
        """
        from redis.exceptions import ResponseError

        try:
            return self._plan(start, limit)
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                self.options.check(self._connect(), self.options.group)
            raise

    def _plan(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._ids(start)  # refuses a checkpoint of another partition count
        self._await_ack()
        connection = self._connect()
        first = resolved_ends(connection, self.options.topic, self.options.group,
                              self.options.consumer, start)
        self._fence(connection, start, first)
        streams = [TopicKeys.of(self.options.topic, p).stream for p in range(len(first))]
        if self._available_now and self._targets is None:
            self._targets = [(last.decode(), int(added)) for last, added in connection.pipelined(
                "STREAM_END", [([stream], []) for stream in streams])]
        total = self._rows(limit)
        stands = connection.pipelined("TAKE_PLAN", [
            ([stream], [self.options.group, self.options.consumer, after])
            for stream, after in zip(streams, first, strict=True)])
        takes = self._takes(first, stands, total)
        offset = (self._taken_offset(takes) if takes is not None
                  else self._held_offset(connection, streams, first, total))
        if self._acker is None:
            self._acker = ThreadPoolExecutor(1, "actorbus-redis-ack")
        self._acking = self._acker.submit(self.ack, first)
        return start if offset is None else offset  # None: nothing new, so no batch

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One read task per topic partition whose range is not empty.

        Raises:
            ValueError: the offsets name another partition count than the topic has.
        """
        last, starts = self._ids(end), self._starts(end)
        takes = end.get("take") or [None] * len(last)
        # An offset written before ``after`` existed starts where ``start`` ends
        lower = [str(i) for i in end.get("after") or self._ids(start)]
        parts: list[InputPartition] = []
        for p, (a, b, s, take) in enumerate(zip(lower, last, starts, takes, strict=True)):
            if take:
                parts.append(TakenRange(p, a, int(take[0]), int(take[1])))
            elif a != b:
                parts.append(HeldRange(p, a, b, s))
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: acked by the next plan, or by `stop`."""
        self._committed = end

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
        from redis.exceptions import ResponseError

        self._await_ack()
        acker, self._acker = self._acker, None
        if acker is not None:
            acker.shutdown()
        try:
            if self._committed is not None:
                self.ack(resolved_ends(self._connect(), self.options.topic, self.options.group,
                                       self.options.consumer, self._committed))
        except BackendUnavailableError as exc:  # the next run acks it first
            logger.warning("actorbus source %s/%s: the last batch stays pending: %s",
                           self.options.topic, self.options.group, exc)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            logger.warning("actorbus source %s/%s: the topic or its group is gone, nothing "
                           "to ack: %s", self.options.topic, self.options.group, exc)
        finally:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the range's entries, as Arrow batches of at most `SLICE_ROWS` rows."""
        assert isinstance(partition, HeldRange | TakenRange)
        connection = self.options.connect()
        try:
            if isinstance(partition, TakenRange):
                yield from read_taken(connection, self.options, self.settings, self.schema,
                                      partition)
            else:
                yield from read_held(connection, self.options, self.settings, self.schema,
                                     partition)
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

    def _fence(self, connection: Connection, start: dict[str, Any], first: list[str]) -> None:
        """Record where the committed batch ``start`` ended (``first``) in each partition
        its read tasks took: a slice that an attempt of one of its tasks still takes after
        this (a speculative attempt Spark no longer waits for) is refused (see
        `read_taken`). Spark plans a batch only once the one before is in its commit log,
        and tells the source of that commit only after the plan, so the plan records it."""
        takes = start.get("take")
        if not takes:
            return
        field = _committed_field(self.options.group, self.options.consumer)
        keys = [TopicKeys.of(self.options.topic, p) for p in range(len(takes))]
        connection.pipelined("FENCE", [([keys[p].stream, keys[p].takes], [field, first[p]])
                                       for p, take in enumerate(takes) if take])

    def _connect(self) -> Connection:
        if self._connection is None:
            self._connection = self.options.connect()
        return self._connection

    def _rows(self, limit: ReadLimit) -> int | None:
        """Entries a batch may hold (None: no bound)."""
        rows = rows_of(limit)
        cap = self.options.max_messages_per_batch
        return min(rows, cap) if rows and cap else rows or cap

    def _takes(self, first: list[str], stands: list[Any], total: int | None,
               ) -> list[tuple[str, int, int]] | None:
        """Per partition, where its new entries start (the group's last delivered id), how
        many the batch takes there and the group's read counter; None where the driver
        takes the batch itself (see the module): the consumer holds entries past the
        start, the group has other consumers, Redis lost the read counter, or the group
        stands before the start."""
        found = []
        for p, (held, position, read, added) in enumerate(stands):
            position = position.decode() if isinstance(position, bytes) else str(position)
            if int(held) or int(read) < 0 or not position or _order(position) < _order(first[p]):
                return None
            target = int(added) if self._targets is None else min(int(added), self._targets[p][1])
            found.append((position, int(read), max(0, target - int(read))))
        rows = shares(total, [unread for _, _, unread in found])
        return [(position, count, read) for (position, read, _), count in zip(found, rows, strict=True)]

    def _taken_offset(self, takes: list[tuple[str, int, int]]) -> dict[str, Any] | None:
        """The offset of a batch whose read tasks take its entries (None: nothing new)."""
        if not any(count for _, count, _ in takes):
            return None
        return self._offset(["" if count else after for after, count, _ in takes],
                            [after for after, _, _ in takes], [""] * len(takes),
                            [[count, read] if count else None for _, count, read in takes])

    def _held_offset(self, connection: Connection, streams: list[str], first: list[str],
                     total: int | None) -> dict[str, Any] | None:
        """The offset of a batch the driver takes into the consumer's pending list
        (None: nothing new)."""
        targets = self._targets or [("", 0)] * len(first)
        # What each partition holds is not known here: each is asked for an even share
        asked = shares(total, [UNLIMITED_ROWS] * len(first))
        ends, counts, taken = self._take(connection, streams, first, targets, asked)
        spare = 0 if total is None else total - sum(counts)
        full = [p for p, count in enumerate(counts) if count >= asked[p]]  # may hold more
        if spare > 0 and full:
            # What partitions that ran short left of the limit goes to those that did not
            more = [0] * len(first)
            for p, count in zip(full, shares(spare, [UNLIMITED_ROWS] * len(full)), strict=True):
                more[p] = count
            middle = ends
            ends, added, began = self._take(connection, streams, middle, targets, more)
            for p, count in enumerate(added):
                if count and began[p] != middle[p]:  # others read between the two takes
                    taken[p] = ""
        if ends == first:
            return None
        return self._offset(ends, first, taken)

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

    def _offset(self, ids: list[str], after: list[str], starts: list[str],
                take: list[list[int] | None] | None = None) -> dict[str, Any]:
        """An offset (see the module); ``take`` only where read tasks take the batch."""
        offset = {"ids": ids, "after": after, "from": starts, REDIS_FIELD: self._name}
        if take is not None:
            offset["take"] = take
        return offset


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


def shares(total: int | None, unread: list[int]) -> list[int]:
    """How many entries a batch takes in each partition, given what each holds unread:
    all of it (up to `UNLIMITED_ROWS`) without a limit; else the limit shared evenly,
    what a partition holding less leaves going to those holding more."""
    if total is None:
        return [min(n, UNLIMITED_ROWS) for n in unread]
    rows, left = [0] * len(unread), total
    while left > 0:
        short = [p for p, n in enumerate(unread) if rows[p] < n]
        if not short:
            break
        share, rest = divmod(left, len(short))
        for i, p in enumerate(short):
            more = min(share + 1 if i < rest else share, unread[p] - rows[p])
            rows[p], left = rows[p] + more, left - more
    return rows


def read_taken(connection: Connection, options: RedisSourceOptions, settings: TopicSettings,
               schema: StructType, partition: TakenRange) -> Iterator[pa.RecordBatch]:
    """Take ``partition``'s entries, slice by slice, then record where the take ended;
    where a record is found, an earlier attempt took them: read what it holds there.
    While Spark takes one slice, a thread of the task takes the next."""
    from redis.exceptions import WatchError

    keys = TopicKeys.of(options.topic, partition.partition)
    field = _take_field(options.group, options.consumer, partition.after, partition.rows)
    reader = connection.plain_reader(keys.stream)
    with connection.guard():
        record = reader.hget(keys.takes, field)
    if record is not None:
        end, whole = _recorded(record)
        yield from read_held(connection, options, settings, schema, HeldRange(
            partition.partition, partition.after, end, partition.after if whole else ""))
        return
    limits = Limits.of(settings, keys, options.group, options.consumer)

    committed = _committed_field(options.group, options.consumer)

    def take(after: str, read: int, rows: int) -> list[list[Any]]:
        # Fenced on where the last committed batch ended (watched: a commit in between
        # makes the transaction fail, and the check runs again)
        with connection.guard(), reader.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(keys.takes)
                    end = pipe.hget(keys.takes, committed)
                    if end is not None and _order(partition.after) < _order(end.decode()):
                        raise RuntimeError(
                            f"actorbus source {options.topic}/{options.group}: the batch of "
                            f"partition {partition.partition} after {partition.after} was "
                            "committed already (a late attempt of its read task, or a "
                            "checkpoint older than the query's last commit); it takes nothing")
                    pipe.multi()
                    pipe.execute_command("XGROUP", "SETID", keys.stream, options.group, after,
                                         "ENTRIESREAD", read)
                    pipe.execute_command("XREADGROUP", "GROUP", options.group, options.consumer,
                                         "COUNT", rows, "STREAMS", keys.stream, ">")
                    _, reply = pipe.execute()
                    break
                except WatchError:
                    continue
        if not reply:
            return []
        # RESP3 answers a map of the one stream, RESP2 a list of [stream, entries]
        return next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]

    last, read, left, whole = partition.after, partition.read, partition.rows, True
    with ThreadPoolExecutor(1, "actorbus-redis-take") as prefetch:
        asked = min(left, SLICE_ROWS)
        entries = take(last, read, asked)
        while entries:
            last, read, left = entries[-1][0].decode(), read + len(entries), left - len(entries)
            following = (prefetch.submit(take, last, read, min(left, SLICE_ROWS))
                         if left > 0 and len(entries) == asked else None)
            asked = min(left, SLICE_ROWS)
            kept, others = own_entries(entries, options.group)
            if others:  # replays meant for other groups: not this group's to read
                whole = False
                with connection.guard():
                    reader.xack(keys.stream, options.group, *others)
            batch = held_batch(HeldSlice(None, kept, last), limits, connection, schema)
            if batch.num_rows:
                yield batch
            entries = following.result() if following is not None else []
    with connection.guard():
        reader.hset(keys.takes, field, f"{last} {'whole' if whole else 'held'}")
