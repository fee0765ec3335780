"""The sinks: rows become messages once per (producer id, batch id), through staging.

Write tasks (executors) stage their Arrow batches on the broker under a part named by
(partition, task attempt, chunk) and return the part names in their commit message;
Spark's commit (driver) then asks the broker to publish exactly those parts, once.
A replayed micro-batch or a re-run batch write with the same ids publishes nothing.

- Streaming: the batch id is Spark's micro-batch id; the producer id is the option
  ``producer_id``, else the query id (stable across restarts from one checkpoint).
- Batch (``df.write``): the batch id is the option ``batch_id``, else one id per job
  (the writer is pickled once to every task and to the commit, so it is stable there).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from runtime.spark._arrow import sink_columns
from runtime.spark._options import SinkOptions

__all__ = ["ActorbusBatchWriter", "ActorbusStreamWriter", "StagedParts"]

_STAGE_ROWS = 50_000


@dataclass
class StagedParts(WriterCommitMessage):
    """What one write task staged: the producer and its part names."""

    producer: str
    parts: list[tuple[int, int, int]] = field(default_factory=list)
    rows: int = 0


def _stage(
    options: SinkOptions, producer: str, batch: str, batches: Iterator[pa.RecordBatch]
) -> StagedParts:
    """Stage every row of this task in chunks; returns the part names."""
    context = TaskContext.get()
    assert context is not None, "write() runs in a Spark task"
    staged = StagedParts(producer=producer)
    with options.connect() as channel:
        for chunk, table in enumerate(_chunks(batches)):
            part = (context.partitionId(), context.attemptNumber(), chunk)
            columns = sink_columns(table, options.error_column)
            if not channel.call("stage", options.topic, producer, batch, part, columns):
                return StagedParts(producer=producer)  # committed before: publish nothing
            staged.parts.append(part)
            staged.rows += table.num_rows
    return staged


def _chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, _STAGE_ROWS):
            yield batch.slice(start, _STAGE_ROWS)


def _parts(messages: list[WriterCommitMessage | None]) -> tuple[str | None, list[Any]]:
    staged = [m for m in messages if isinstance(m, StagedParts)]
    producer = staged[0].producer if staged else None
    return producer, [part for m in staged for part in m.parts]


class ActorbusStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("actorbus")``: exactly once per (producer, micro-batch)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedParts:
        """Executor: stage this task's rows under the micro-batch id."""
        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        batch = context.getLocalProperty("streaming.sql.batchId")
        producer = self.options.producer_id or context.getLocalProperty("sql.streaming.queryId")
        if batch is None or producer is None:
            raise RuntimeError("actorbus sink: no streaming batch id in this task")
        return _stage(self.options, producer, batch, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: publish the staged parts of micro-batch ``batchId`` once."""
        producer, parts = _parts(messages)
        producer = self.options.producer_id or producer
        if producer is not None:
            with self.options.connect() as channel:
                channel.call("commit", self.options.topic, producer, str(batchId), parts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: drop what the failed micro-batch staged (a replay stages it again)."""
        producer, _ = _parts(messages)
        producer = self.options.producer_id or producer
        if producer is not None:
            with self.options.connect() as channel:
                channel.call("abort", self.options.topic, producer, str(batchId))


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
        with self.options.connect() as channel:
            channel.call("commit", self.options.topic, self.producer, self.batch, parts)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: drop what the failed job staged."""
        with self.options.connect() as channel:
            channel.call("abort", self.options.topic, self.producer, self.batch)
