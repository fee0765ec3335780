"""Ceilings for the Spark rows: the same work between in-memory Python data sources.

- ``memory`` streaming source: the actorbus source's schema and batch sizes, rows made
  in the reading task as Arrow batches (distinct payloads), nothing on a network;
- ``discard`` sink: an Arrow writer (batch and streaming) that counts and drops rows;
- ``raw_redis_ceiling`` streaming source: the least a Redis Streams consumer does, with
  redis-py alone: each task reads its stream with XREADGROUP and acks every read with
  XACK at once (no lease log, no fence, no outcomes or stats; not replayable).

What a Python data source can reach on the machine: the actorbus rows are reported as
a ratio of these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from runtime.spark._arrow import SOURCE_SCHEMA
from runtime.spark.redis._rows import published_times

__all__ = ["MemorySource", "RawRedisSource", "payload_of"]

_CHUNK = 20_000
_FILL = b"x" * 88


def payload_of(index: int) -> bytes:
    """The distinct 100-byte payload of row ``index``."""
    return b"%012d" % index + _FILL


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start, self.end = start, end


class _FixedRun(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans ``rows`` rows in batches of ``batch``, under every trigger; the readers below
    say where a batch's rows come from.

    It supports ``availableNow`` as the actorbus source does: without it, Spark wraps a
    source in a ``ReadAllAvailable`` limit for that trigger, and the ceiling ran the
    whole range as one batch while the actorbus side ran the batches it was given.
    """

    def __init__(self, rows: int, batch: int, schema: StructType) -> None:
        self.rows, self.batch, self.schema = rows, batch, schema

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """The range is fixed: the run ends at ``rows``."""

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        first = int(start["offset"])
        rows = self.rows - first if isinstance(limit, ReadAllAvailable) else self.batch
        return {"offset": min(first + rows, self.rows)}

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release (the raw Redis source acked each read at once)."""


class _MemoryReader(_FixedRun):
    """Makes each batch's rows in its reading tasks (two ranges)."""

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        first, last = int(start["offset"]), int(end["offset"])
        step = max(-(-(last - first) // 2), 1)
        return [_Range(a, min(a + step, last)) for a in range(first, last, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        schema = to_arrow_schema(self.schema, timezone="UTC")
        for first in range(partition.start, partition.end, _CHUNK):
            yield _rows(first, min(first + _CHUNK, partition.end), schema)


def _rows(first: int, last: int, schema: pa.Schema) -> pa.RecordBatch:
    return _batch(pa.array([f"m{i}" for i in range(first, last)], pa.string()),
                  [payload_of(i) for i in range(first, last)],
                  pa.array([0] * (last - first), pa.timestamp("us", tz="UTC")), schema)


def _batch(ids: pa.Array, payloads: list[bytes], published_at: pa.Array,
           schema: pa.Schema) -> pa.RecordBatch:
    """Rows with these ids, payloads and times, no key or attributes, first attempts."""
    count = len(payloads)
    columns = {
        "message_id": ids,
        "key": pa.nulls(count, pa.string()),
        "payload": pa.array(payloads, pa.binary()),
        "attributes": pa.MapArray.from_arrays(
            pa.array([0] * (count + 1), pa.int32()), pa.array([], pa.string()),
            pa.array([], pa.string())),
        "published_at": published_at,
        "attempt": pa.array([1] * count, pa.int32()),
    }
    return pa.RecordBatch.from_arrays(
        [columns[f.name].cast(f.type) for f in schema], schema=schema)


@dataclass
class Counted(WriterCommitMessage):
    """Rows one discarding task saw."""

    rows: int


def _count(batches: Iterator[pa.RecordBatch]) -> Counted:
    return Counted(sum(batch.num_rows for batch in batches))


class _DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        return _count(iterator)


class _DiscardStreamWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        return _count(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to publish."""


class MemorySource(DataSource):
    """``format("memory_ceiling")``: options ``rows`` and ``batch`` for the source."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "memory_ceiling"

    def schema(self) -> str:
        """The actorbus source's columns."""
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> _MemoryReader:
        """Rows made in the reading task."""
        return _MemoryReader(int(self.options["rows"]), int(self.options["batch"]), schema)

    def writer(self, schema: StructType, overwrite: bool) -> _DiscardWriter:
        """Counts and drops."""
        return _DiscardWriter()

    def streamWriter(self, schema: StructType, overwrite: bool) -> _DiscardStreamWriter:
        """Counts and drops."""
        return _DiscardStreamWriter()


class _Stream(InputPartition):
    """Up to ``rows`` entries of ``stream``; None: all it holds (a run's last batch,
    since the publisher's batches need not spread the rows evenly)."""

    def __init__(self, stream: str, rows: int | None) -> None:
        super().__init__((stream, rows))
        self.stream, self.rows = stream, rows


class _RawRedisReader(_FixedRun):
    """Reads each batch's entries shared over ``streams`` (one task each), as consumer
    ``raw`` of group ``group``; an entry's fields are its body alone."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(int(options["rows"]), int(options["batch"]), schema)
        self.url, self.group = options["url"], options["group"]
        self.streams = options["streams"].split(",")

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        rows = int(end["offset"]) - int(start["offset"])
        share = None if int(end["offset"]) >= self.rows else rows // len(self.streams)
        return [_Stream(stream, share) for stream in self.streams] if rows else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import redis

        assert isinstance(partition, _Stream)
        schema = to_arrow_schema(self.schema, timezone="UTC")
        client: Any = redis.Redis.from_url(self.url, protocol=3)
        client.set_response_callback("XREADGROUP", lambda reply, **_: reply)  # as Redis sends it
        left = partition.rows
        try:
            while left is None or left > 0:
                count = _CHUNK if left is None else min(_CHUNK, left)
                reply = client.execute_command("XREADGROUP", "GROUP", self.group, "raw", "COUNT",
                                               count, "STREAMS", partition.stream, ">")
                if not reply:
                    return
                (entries,) = reply.values()  # RESP3: {stream: entries}
                ids = [entry_id for entry_id, _ in entries]
                client.execute_command("XACK", partition.stream, self.group, *ids)
                left = None if left is None else left - len(ids)
                yield _entry_rows(ids, [fields[1] for _, fields in entries], schema)
        finally:
            client.close()


def _entry_rows(ids: list[bytes], bodies: list[bytes], schema: pa.Schema) -> pa.RecordBatch:
    """Stream entries as rows: an entry's id is its message id and holds its time."""
    text_ids = pa.array(ids, pa.binary()).cast(pa.string())
    return _batch(text_ids, bodies, published_times(text_ids), schema)


class RawRedisSource(DataSource):
    """``format("raw_redis_ceiling")``: options ``url``, ``streams`` (comma-separated
    stream keys), ``group``, ``rows`` and ``batch``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "raw_redis_ceiling"

    def schema(self) -> str:
        """The actorbus source's columns."""
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> _RawRedisReader:
        """Reads with redis-py alone."""
        return _RawRedisReader(dict(self.options), schema)


def register_ceiling(spark: Any) -> None:
    """Register ``memory_ceiling`` and ``raw_redis_ceiling`` with ``spark``."""
    spark.dataSource.register(MemorySource)
    spark.dataSource.register(RawRedisSource)
