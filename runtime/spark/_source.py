"""The streaming source: a Spark query as one member of a group, through a lease log.

Offsets are the lease log's: ``{"offset": n}``. Where each call runs:
- driver runner (one reader instance per query run): ``initialOffset``,
  ``latestOffset``, ``partitions``, ``commit``, ``stop`` — and the heartbeat thread;
- executors (pickled copies): ``read``, each task with a connection of its own.

Acks (cumulative) happen at two points only: in ``commit(end)``, and at the top of
``latestOffset(start, ...)`` — Spark asks for the next batch only after the previous
batch's commit-log entry was written, and ``start`` is that batch's end. This is what
acks the *last* batch, which ``commit`` never sees. Nothing is acked earlier.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from runtime.broker._client import Channel
from runtime.spark._arrow import record_batch
from runtime.spark._heartbeat import Heartbeat
from runtime.spark._options import DEFAULT_FETCH_ROWS, SourceOptions

__all__ = ["ActorbusStreamReader", "OffsetRange"]

# availableNow pulls what waits in the group when the run starts, in rounds this big.
_AVAILABLE_NOW_ROUNDS = 50


class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one read task."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class ActorbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a group through the broker's lease log of (topic, group, consumer)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._channel: Channel | None = None
        self._heartbeat: Heartbeat | None = None
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy: never a socket or a thread.
        return {"options": self.options, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["schema"])  # type: ignore[misc]

    def initialOffset(self) -> dict[str, int]:
        """The consumer's acked position: a fresh query resumes where the last one acked."""
        return {"offset": self._call("lease_position")}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_messages_per_batch`` as Spark's admission control."""
        limit = self.options.max_messages_per_batch
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Lease what waits in the group now; the run ends there."""
        end = self._call("lease_position")
        for _ in range(_AVAILABLE_NOW_ROUNDS):
            grown = self._call("lease_latest", end, None)
            if grown == end:
                break
            end = grown
        self._target = end

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """Ack ``start`` (its batch is committed), then lease the next batch."""
        first = int(start["offset"])
        self._call("lease_ack", first)
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if self._target is not None:
            if first >= self._target:
                return {"offset": first}
            rows = min(rows, self._target - first) if rows else self._target - first
        return {"offset": self._call("lease_latest", first, rows)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """Split ``[start, end)`` into ``partitions`` ranges."""
        first, last = int(start["offset"]), int(end["offset"])
        if last <= first:
            return []
        step = -(-(last - first) // self.options.partitions)
        return [OffsetRange(a, min(a + step, last)) for a in range(first, last, step)]

    def commit(self, end: dict[str, int]) -> None:
        """Spark committed everything below ``end``: ack it."""
        self._call("lease_ack", int(end["offset"]))

    def stop(self) -> None:
        """Stop the heartbeat and disconnect; unacked leases expire unless resumed."""
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the leased records of the partition's range, as Arrow batches."""
        assert isinstance(partition, OffsetRange)
        with self.options.connect() as channel:
            for first in range(partition.start, partition.end, DEFAULT_FETCH_ROWS):
                last = min(first + DEFAULT_FETCH_ROWS, partition.end)
                columns = channel.call("lease_fetch", *self.options.lease, first, last)
                if columns["message_id"]:
                    yield record_batch(columns, self.schema)

    def _call(self, operation: str, *args: Any) -> Any:
        if self._channel is None:
            self._channel = self.options.connect()
        if self._heartbeat is None:
            channel = self._channel
            self._heartbeat = Heartbeat(
                lambda: channel.call("lease_heartbeat", *self.options.lease),
                interval=self.options.lease_seconds / 3,
                name=f"actorbus-lease-heartbeat-{self.options.consumer}",
            )
        return self._channel.call(operation, *self.options.lease, *args)
