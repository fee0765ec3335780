"""The sinks on a Redis topic: rows become messages once per (producer id, batch id).

Write tasks (executors) stage their rows in Redis, each chunk a list in the slot of
the topic partition it goes to (`TopicKeys.staged`), and return the part names in their
commit message. Spark's commit (driver) then runs one script per topic partition that
publishes exactly those parts, as the backend's publish would (same fields, counters,
groups, dead letters), and records (producer, batch) in the partition's ``committed``
hash in the same step: a commit retried after a lost reply, a replayed micro-batch or a
re-run batch write with the same ids publishes nothing again.

Staged parts expire after `STAGED_TTL` seconds: what a failed task attempt staged never
stays behind. A commit that finds a listed part gone (its batch outlived the TTL)
publishes nothing of that partition and fails the batch, which Spark runs again.

Unkeyed rows of a topic with several partitions go to the partition of their write
task (spread over the partitions); a keyed row goes to the partition of its key.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from runtime.core._settings import TopicSettings
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys, partition_of
from runtime.spark._arrow import sink_batch
from runtime.spark._options import RedisSinkOptions
from runtime.spark._sink import streaming_task_batch
from runtime.spark.redis._rows import staged_rows

__all__ = ["RedisBatchWriter", "RedisStagedParts", "RedisStreamWriter", "commit_parts"]

STAGED_TTL = 86_400
"""Seconds a staged part lives: longer than a batch's tasks and commit take, short
enough that the parts of failed attempts do not pile up."""
_STAGE_ROWS = 50_000
_PUSH_VALUES = 20_000  # values per RPUSH


@dataclass
class RedisStagedParts(WriterCommitMessage):
    """What one write task staged: the producer and its parts (topic partition, name)."""

    producer: str
    parts: list[tuple[int, str]] = field(default_factory=list)
    rows: int = 0


def _stage(options: RedisSinkOptions, settings: TopicSettings, producer: str, batch: str,
           batches: Iterator[pa.RecordBatch]) -> RedisStagedParts:
    """Stage every row of this task, chunk by chunk; returns the part names."""
    context = TaskContext.get()
    assert context is not None, "write() runs in a Spark task"
    task = f"{context.partitionId()}:{context.attemptNumber()}"
    staged = RedisStagedParts(producer=producer)
    connection = options.connect()
    try:
        with connection.guard():
            for chunk, table in enumerate(_chunks(batches)):
                pipe = connection.client.pipeline(transaction=False)
                rows = sink_batch(table, options.error_column)
                for partition, part_rows in _by_partition(rows, settings.partitions,
                                                          context.partitionId()):
                    keys = TopicKeys.of(options.topic, partition)
                    for part in staged_rows(part_rows):
                        name = f"{task}:{chunk}:{part.layout}"
                        key = keys.staged(producer, batch, name)
                        pipe.delete(key)  # a part of this attempt staged before, if any
                        pipe.rpush(key, part.layout)
                        for first in range(0, len(part.values), _PUSH_VALUES):
                            pipe.rpush(key, *part.values[first:first + _PUSH_VALUES])
                        pipe.expire(key, STAGED_TTL)
                        staged.parts.append((partition, name))
                        staged.rows += part.rows
                pipe.execute()  # one chunk at a time: a task holds one chunk's commands
    finally:
        connection.close()
    return staged


def _by_partition(batch: pa.RecordBatch, partitions: int,
                  task: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of ``batch`` per topic partition (keyed ones by their key)."""
    if partitions == 1:
        yield 0, batch
        return
    home = task % partitions
    if "key" not in batch.schema.names:
        yield home, batch
        return
    keys = batch.column("key").to_pylist()
    # No key (None or empty) stays in the task's partition, as an unkeyed publish spreads.
    targets = pa.array([partition_of(k if isinstance(k, bytes) else str(k), partitions)
                        if k else home for k in keys], pa.int32())
    for partition in pc.unique(targets).to_pylist():
        yield int(partition), batch.filter(pc.equal(targets, partition))


def _chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, _STAGE_ROWS):
            yield batch.slice(start, _STAGE_ROWS)


def commit_parts(connection: Connection, topic: str, settings: TopicSettings, producer: str,
                 batch: str, parts: list[tuple[int, str]]) -> int:
    """Publish the staged ``parts`` of (``producer``, ``batch``) once per partition;
    returns how many rows this call published (0 for a commit done before).

    Raises:
        RuntimeError: a part is gone (expired): that partition published nothing.
        BackendUnavailableError: Redis did not answer (retrying is safe).
    """
    per_partition: dict[int, list[str]] = {}
    for partition, name in parts:
        per_partition.setdefault(partition, []).append(name)
    published = 0
    for partition, names in sorted(per_partition.items()):
        keys = TopicKeys.of(topic, partition)
        state, count, _ = connection.run("STAGED_COMMIT", [
            keys.stream, keys.groups, keys.readers, keys.stats, keys.remaining, keys.dead,
            keys.committed, *[keys.staged(producer, batch, n) for n in names],
        ], [f"{producer}\x1f{batch}", settings.dead_letter_limit or 0])
        if state == b"missing":
            raise RuntimeError(
                f"actorbus sink {topic}: staged part {names[int(count) - 1]!r} of batch "
                f"{batch} expired before its commit; the batch is run again")
        published += int(count) if state == b"ok" else 0
    return published


def _abort(options: RedisSinkOptions, producer: str, batch: str,
           parts: list[tuple[int, str]]) -> None:
    connection = options.connect()
    try:
        with connection.guard():
            for partition, name in parts:
                connection.client.delete(TopicKeys.of(options.topic, partition).staged(
                    producer, batch, name))
    finally:
        connection.close()


def _parts(messages: list[WriterCommitMessage | None]) -> tuple[str | None, list[tuple[int, str]]]:
    staged = [m for m in messages if isinstance(m, RedisStagedParts)]
    producer = staged[0].producer if staged else None
    return producer, [part for m in staged for part in m.parts]


def _commit(options: RedisSinkOptions, settings: TopicSettings, producer: str, batch: str,
            parts: list[tuple[int, str]]) -> None:
    connection = options.connect()
    try:
        commit_parts(connection, options.topic, settings, producer, batch, parts)
    finally:
        connection.close()


class RedisStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("actorbus").option("redis", url)``: exactly once per
    (producer, micro-batch).

    Args:
        options: the parsed options.
        settings: the topic's recorded settings (its partitions, dead-letter bound).
    """

    def __init__(self, options: RedisSinkOptions, settings: TopicSettings) -> None:
        self.options = options
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RedisStagedParts:
        """Executor: stage this task's rows under the micro-batch id."""
        producer, batch = streaming_task_batch(self.options.producer_id)
        return _stage(self.options, self.settings, producer, batch, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: publish the staged parts of micro-batch ``batchId`` once."""
        producer, parts = _parts(messages)
        producer = self.options.producer_id or producer
        if producer is not None and parts:
            _commit(self.options, self.settings, producer, str(batchId), parts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: drop what the failed micro-batch staged (a replay stages it again)."""
        producer, parts = _parts(messages)
        producer = self.options.producer_id or producer
        if producer is not None:
            _abort(self.options, producer, str(batchId), parts)


class RedisBatchWriter(DataSourceArrowWriter):
    """``df.write.format("actorbus").option("redis", url)``: exactly once per (producer,
    batch id)."""

    def __init__(self, options: RedisSinkOptions, settings: TopicSettings) -> None:
        self.options = options
        self.settings = settings
        self.producer = options.producer_id or "batch"
        self.batch = options.batch_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RedisStagedParts:
        """Executor: stage this task's rows."""
        return _stage(self.options, self.settings, self.producer, self.batch, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: publish the staged parts once."""
        _commit(self.options, self.settings, self.producer, self.batch, _parts(messages)[1])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: drop what the failed job staged."""
        _abort(self.options, self.producer, self.batch, _parts(messages)[1])
