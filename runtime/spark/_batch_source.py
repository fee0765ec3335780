"""The batch source: ``spark.read.format("actorbus")`` reads what a group holds now.

Planning (``partitions``, on the driver) leases what waits in the group for the
consumer (default ``<group>-read``, apart from a streaming query's), up to
``max_messages_per_batch``, and splits it into ``partitions`` offset ranges. Each read
task fetches its range and, once Spark has taken every row of it, acks exactly that
range. A task that fails before then acks nothing, and its retry reads the same
records (the lease log serves a range identically until it is acked); what no task
finished returns to the group when the lease expires.

Reading is at most once past a finished task: a job that fails after a task finished
its range (in a later stage) does not get those messages back. Evaluating the same
DataFrame twice reads the group twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from runtime.spark._options import SourceOptions
from runtime.spark._source import OffsetRange, fetch_range

__all__ = ["ActorbusBatchReader"]

# Planning pulls from the group until it stops growing, at most this many rounds.
_PLAN_ROUNDS = 50


class ActorbusBatchReader(DataSourceReader):
    """Reads and acks what the group holds for the consumer when the read is planned."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Lease what waits now; one offset range per ``partitions``."""
        lease, limit = self.options.lease, self.options.max_messages_per_batch
        with self.options.connect() as channel:
            start = int(channel.call("lease_position", *lease))
            end = int(channel.call("lease_target", *lease, start)["end"])
            for _ in range(_PLAN_ROUNDS):
                rows = None if limit is None else limit - (end - start)
                if rows is not None and rows <= 0:
                    break
                grown = int(channel.call("lease_latest", *lease, end, rows))
                if grown == end:
                    break
                end = grown
        if limit is not None:
            end = min(end, start + limit)
        if end <= start:
            return [OffsetRange(start, start)]
        step = -(-(end - start) // self.options.partitions)
        return [OffsetRange(a, min(a + step, end)) for a in range(start, end, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the range's records, then ack the range."""
        assert isinstance(partition, OffsetRange)
        with self.options.connect() as channel:
            yield from fetch_range(channel, self.options, self.schema, partition)
            if partition.end > partition.start:
                channel.call("lease_ack_range", *self.options.lease, partition.start, partition.end)

    def __repr__(self) -> str:
        return f"ActorbusBatchReader({self.options.topic}/{self.options.group})"


def batch_options(options: Any) -> SourceOptions:
    """Source options for a batch read: the consumer defaults to ``<group>-read``."""
    parsed = SourceOptions.parse(options)
    if not options.get("consumer"):
        parsed = SourceOptions.parse({**options, "consumer": f"{parsed.group}-read"})
    return parsed
