"""The sinks: rows become messages once per (producer id, batch id), through staging.

Write tasks (executors) stage their Arrow batches on the broker under a part named by
(partition, task attempt, chunk) and return the part names in their commit message;
Spark's commit (driver) then asks the broker to publish exactly those parts, once.
A replayed micro-batch or a re-run batch write with the same ids publishes nothing.

An optional string column ``topic`` routes each row to the topic it names (null: the
``topic`` option). Rows are staged per topic, and the commit publishes each topic's
parts once per (topic, producer, batch id).

- Streaming: the batch id is Spark's micro-batch id; the producer id is the option
  ``producer_id``, else the query id (stable across restarts from one checkpoint).
- Batch (``df.write``): the batch id is the option ``batch_id``, else one id per job
  (the writer is pickled once to every task and to the commit, so it is stable there).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from runtime.broker._client import Channel
from runtime.spark._arrow import sink_ipc
from runtime.spark._options import SinkOptions

__all__ = ["ActorbusBatchWriter", "ActorbusStreamWriter", "StagedParts", "stage_chunks",
           "streaming_task_batch"]

_STAGE_ROWS = 50_000


@dataclass
class StagedParts(WriterCommitMessage):
    """What one write task staged: the producer and its part names."""

    producer: str
    parts: list[tuple[str, tuple[int, int, int]]] = field(default_factory=list)  # (topic, part)
    rows: int = 0


def _stage(
    options: SinkOptions, producer: str, batch: str, batches: Iterator[pa.RecordBatch]
) -> StagedParts:
    """Stage every row of this task in chunks; returns the part names."""
    context = TaskContext.get()
    assert context is not None, "write() runs in a Spark task"
    with options.connect() as channel:
        return stage_chunks(channel, options, producer, batch,
                            (context.partitionId(), context.attemptNumber()), _chunks(batches))


def stage_chunks(
    channel: Channel, options: SinkOptions, producer: str, batch: str,
    task: tuple[int, int], chunks: Iterable[pa.RecordBatch],
) -> StagedParts:
    """Stage ``chunks`` as parts (``task``'s partition and attempt, the chunk's number)
    of (``producer``, ``batch``), per destination topic; returns the part names.

    One chunk is staged on the broker (a thread of this task waits for the call) while
    the task converts the next: the broker's work and the task's overlap.
    """
    staged = StagedParts(producer=producer)
    committed: set[str] = set()  # topics that published this batch before: nothing again
    with ThreadPoolExecutor(1, "actorbus-stage") as stager:
        waiting: tuple[Future[Any], str, tuple[int, int, int], int] | None = None
        for chunk, table in enumerate(chunks):
            part = (*task, chunk)
            for topic, rows in _by_topic(table, options.topic):
                if topic in committed:
                    continue
                data = sink_ipc(rows, options.error_column)
                if waiting is not None:
                    _staged(staged, committed, *waiting)
                waiting = (stager.submit(channel.call, "stage", topic, producer, batch, part, data),
                           topic, part, rows.num_rows)
        if waiting is not None:
            _staged(staged, committed, *waiting)
    return staged


def _staged(
    staged: StagedParts, committed: set[str], call: Future[Any], topic: str,
    part: tuple[int, int, int], rows: int,
) -> None:
    """Record a stage call's outcome: a part staged, or the topic's batch committed."""
    if not call.result():
        committed.add(topic)  # a later part of it is refused by the broker as well
        return
    staged.parts.append((topic, part))
    staged.rows += rows


def _by_topic(table: pa.RecordBatch, default: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of ``table`` per destination topic (column ``topic``, null: ``default``)."""
    if "topic" not in table.schema.names or table.column("topic").null_count == table.num_rows:
        yield default, table
        return
    topics = pc.fill_null(table.column("topic"), default)
    for topic in pc.unique(topics).to_pylist():
        yield str(topic), table.filter(pc.equal(topics, topic))


def _commit(options: SinkOptions, producer: str, batch: str, parts: list[Any]) -> None:
    """Publish each topic's staged parts; the option's topic is always committed."""
    per_topic: dict[str, list[Any]] = {options.topic: []}
    for topic, part in parts:
        per_topic.setdefault(topic, []).append(part)
    with options.connect() as channel:
        for topic, topic_parts in per_topic.items():
            channel.call("commit", topic, producer, batch, topic_parts)


def _abort(options: SinkOptions, producer: str, batch: str, parts: list[Any]) -> None:
    with options.connect() as channel:
        for topic in {options.topic} | {topic for topic, _ in parts}:
            channel.call("abort", topic, producer, batch)


def _chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, _STAGE_ROWS):
            yield batch.slice(start, _STAGE_ROWS)


def _parts(messages: list[WriterCommitMessage | None]) -> tuple[str | None, list[Any]]:
    staged = [m for m in messages if isinstance(m, StagedParts)]
    producer = staged[0].producer if staged else None
    return producer, [part for m in staged for part in m.parts]


def streaming_task_batch(producer_id: str | None) -> tuple[str, str]:
    """In a streaming write task: (the producer id, or the query's id; the micro-batch id).

    Raises:
        RuntimeError: the task belongs to no streaming micro-batch.
    """
    context = TaskContext.get()
    assert context is not None, "write() runs in a Spark task"
    batch = context.getLocalProperty("streaming.sql.batchId")
    producer = producer_id or context.getLocalProperty("sql.streaming.queryId")
    if batch is None or producer is None:
        raise RuntimeError("actorbus sink: no streaming batch id in this task")
    return producer, batch


class ActorbusStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("actorbus")``: exactly once per (producer, micro-batch)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedParts:
        """Executor: stage this task's rows under the micro-batch id."""
        producer, batch = streaming_task_batch(self.options.producer_id)
        return _stage(self.options, producer, batch, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: publish the staged parts of micro-batch ``batchId`` once."""
        producer, parts = _parts(messages)
        producer = self.options.producer_id or producer
        if producer is not None:
            _commit(self.options, producer, str(batchId), parts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: drop what the failed micro-batch staged (a replay stages it again)."""
        producer, parts = _parts(messages)
        producer = self.options.producer_id or producer
        if producer is not None:
            _abort(self.options, producer, str(batchId), parts)


class ActorbusBatchWriter(DataSourceArrowWriter):
    """``df.write.format("actorbus")``: exactly once per (producer, batch id)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.producer = options.producer_id or "batch"
        self.batch = options.batch_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedParts:
        """Executor: stage this task's rows."""
        return _stage(self.options, self.producer, self.batch, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: publish the staged parts once."""
        _, parts = _parts(messages)
        _commit(self.options, self.producer, self.batch, parts)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: drop what the failed job staged."""
        _abort(self.options, self.producer, self.batch, _parts(messages)[1])
