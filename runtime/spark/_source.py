"""The streaming source: a Spark query as one member of a group, through a lease log.

Offsets are the lease log's: ``{"offset": n, "lease": [...]}`` (the lease names the
broker and the lease log, for the progress listener). Where each call runs:
- driver runner (one reader instance per query run): ``initialOffset``,
  ``latestOffset``, ``reportLatestOffset``, ``partitions``, ``commit``, ``stop`` — and
  the heartbeat thread;
- executors (pickled copies): ``read``, each task with a connection of its own;
- the user's driver process: the progress listener (see `runtime.spark._listener`).

Acks are cumulative and happen only below an offset Spark has committed: in
``commit(end)``; at the top of ``latestOffset(start, ...)`` (Spark asks for the next
batch only after the previous batch's commit-log entry was written, and ``start`` is
that batch's end); and in the progress listener (a progress event follows the batch's
commit-log entry) — that one acks the last batch of a query that stops, and the only
batch of ``trigger(once=True)``, which the reader never hears of again. The broker acks
only records its log handed out, so an offset from a checkpoint that a restarted broker
never served acks nothing.

``availableNow`` leases nothing up front: on its first batch it asks the broker how
much waits for it (``lease_target``: what its group holds) and ends the run at that
offset, or earlier once nothing waits for it any more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
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
from runtime.spark._options import SourceOptions

__all__ = [
    "ActorbusStreamReader", "DataLossError", "OffsetRange", "fetch_range", "lease_of_offset",
    "read_limit", "rows_of",
]

logger = logging.getLogger(__name__)
LEASE_FIELD = "lease"
# Most lease calls for one batch (each stops when the group has nothing ready at once).
_LEASE_ROUNDS = 8
# How long an availableNow run goes on asking for messages the broker says still wait
# for it (its group refills its member asynchronously) before it ends without them.
AVAILABLE_NOW_PATIENCE = 10.0
# Rows per Arrow batch handed to Spark, and in a task's first fetch: Spark streams a
# task's batches on one at a time, so the first rows reach the next stage (a sink's
# write) while the rest of the range is still being read.
SLICE_ROWS = 20_000



def read_limit(max_messages: int | None) -> ReadLimit:
    """Spark's admission control for ``max_messages_per_batch`` (None: all available)."""
    return ReadMaxRows(max_messages) if max_messages else ReadAllAvailable()


def rows_of(limit: ReadLimit) -> int | None:
    """The rows ``limit`` admits into one batch, or None for no bound."""
    return limit.max_rows if isinstance(limit, ReadMaxRows) else None

class DataLossError(RuntimeError):
    """The checkpoint names offsets the broker can no longer serve."""


def lease_of_offset(offset: dict[str, Any]) -> list[Any] | None:
    """The lease an actorbus offset names: [address, authkey_env, topic, group,
    consumer, lease_seconds]; None for another source's offset."""
    lease = offset.get(LEASE_FIELD)
    return lease if isinstance(lease, list) and len(lease) == 6 else None


class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one read task."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


def fetch_range(
    channel: Channel, options: SourceOptions, schema: StructType, partition: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """The leased records of ``partition``'s range as Arrow batches: the broker sends as
    much of the range as its fetch budget holds, as Arrow IPC bytes naming where it
    ended; the next call starts there. While Spark works on one batch, a thread of the
    task fetches the next: the broker's work and the task's overlap."""
    def fetch(first: int, last: int) -> Any:
        return channel.call("lease_fetch_arrow", *options.lease, first, last)

    first = partition.start
    if first >= partition.end:
        return
    with ThreadPoolExecutor(1, "actorbus-fetch") as fetcher:
        reply = fetch(first, min(first + SLICE_ROWS, partition.end))
        while True:
            batch, end = record_batch(reply, schema)
            if end <= first:
                raise RuntimeError(f"actorbus: the broker's fetch from offset {first} did not advance")
            following = fetcher.submit(fetch, end, partition.end) if end < partition.end else None
            for start in range(0, batch.num_rows, SLICE_ROWS):
                yield batch.slice(start, SLICE_ROWS)
            if following is None:
                return
            first, reply = end, following.result()


class ActorbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a group through the broker's lease log of (topic, group, consumer)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._channel: Channel | None = None
        self._heartbeat: Heartbeat | None = None
        self._available_now = False
        self._target: int | None = None
        self._start = 0
        self._last_batch = time.monotonic()
        host, port = options.address
        self._lease_name = [f"{host}:{port}", options.authkey_env, *options.lease]

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy: never a socket or a thread.
        return {"options": self.options, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["schema"])  # type: ignore[misc]

    def initialOffset(self) -> dict[str, Any]:
        """The consumer's acked position: a fresh query resumes where the last one acked."""
        return self._offset(self._call("lease_position"))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_messages_per_batch`` as Spark's admission control."""
        return read_limit(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """End this run at what waits when its first batch is planned (nothing leased now)."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Ack ``start`` (its batch is committed), then lease the next batch.

        ``max_messages_per_batch`` bounds every batch, also under ``trigger(once=True)``,
        where Spark passes no limit.
        """
        first = self._start = int(start["offset"])
        self.ack(first)
        if self._too_few(first):
            return self._offset(first)
        rows = self._rows(limit)
        if self._available_now:
            if self._target is None:
                self._target = self._readable(first)
            if first >= self._target:
                return self._offset(first)
            rows = min(rows, self._target - first) if rows else self._target - first
        end = self._lease(first, rows)
        if end == first and self._available_now:
            end = self._lease_what_waits(first, rows)
        if end > first:
            self._last_batch = time.monotonic()
        return self._offset(end)

    def _lease_what_waits(self, first: int, rows: int | None) -> int:
        """An availableNow lease came back empty: an offset equal to ``first`` ends the
        run, so ask again while the broker says messages still wait for this consumer
        (its group refills the member after each ack, asynchronously: a busy machine
        took longer than a lease lingers, and runs ended with rows unread). The target
        shrinks to what still waits (other members may take some)."""
        give_up = time.monotonic() + AVAILABLE_NOW_PATIENCE
        while time.monotonic() < give_up:
            readable = self._readable(first)
            self._target = readable if self._target is None else min(self._target, readable)
            if first >= self._target:
                break
            end = self._lease(first, rows)
            if end > first:
                return end
        return first

    def reportLatestOffset(self) -> dict[str, Any]:
        """What the consumer could read now: leased plus waiting (``latestOffset`` in
        progress; minus ``endOffset`` it is the lag in messages)."""
        return self._offset(self._readable(self._start))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Split ``[start, end)`` into ``partitions`` ranges.

        Raises:
            DataLossError: the broker can no longer serve part of the range (a batch
                planned before a broker restart, or offsets acked since), unless
                ``fail_on_data_loss`` is false: then a warning, and the batch has what
                is left.
        """
        first, last = int(start["offset"]), int(end["offset"])
        if last <= first:
            return []
        self._check_loss(first, last)
        step = -(-(last - first) // self.options.partitions)
        return [OffsetRange(a, min(a + step, last)) for a in range(first, last, step)]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything below ``end``: ack it."""
        self.ack(int(end["offset"]))

    def ack(self, offset: int) -> None:
        """Ack below ``offset``; warn about messages whose delivery had settled first."""
        done = self._call("lease_ack", offset)
        if done["late"]:
            logger.warning(
                "actorbus source %s/%s: %d leased messages had passed the topic's "
                "ack_timeout before the ack; the topic redelivered or dead-lettered them "
                "(raise ack_timeout, or make batches shorter)",
                self.options.topic, self.options.group, done["late"])

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
            yield from fetch_range(channel, self.options, self.schema, partition)

    def _lease(self, first: int, rows: int | None) -> int:
        """Lease the batch from ``first``: the broker fills it from the group, which
        hands its member messages asynchronously; ask again while the batch grows."""
        end = first
        for _ in range(_LEASE_ROUNDS):
            grown = int(self._call("lease_latest", first, rows))
            if grown == end or (rows is not None and grown >= first + rows):
                return grown
            end = grown
        return end

    def _too_few(self, first: int) -> bool:
        """Fewer than ``min_messages_per_batch`` wait, and ``max_trigger_delay`` has not
        passed since the last batch: no batch yet (never under availableNow)."""
        least = self.options.min_messages_per_batch
        if least is None or self._available_now:
            return False
        if time.monotonic() - self._last_batch >= self.options.max_trigger_delay:
            return False
        return self._readable(first) - first < least

    def _readable(self, first: int) -> int:
        """The offset the consumer could read up to from ``first``, leasing nothing:
        what it leased plus what its group holds for it (``lease_target``)."""
        where = self._call("lease_target", first)
        return int(where["end"]) + int(where["waiting"])

    def _rows(self, limit: ReadLimit) -> int | None:
        rows = rows_of(limit)
        cap = self.options.max_messages_per_batch
        return min(rows, cap) if rows and cap else rows or cap

    def _offset(self, offset: int) -> dict[str, Any]:
        return {"offset": offset, LEASE_FIELD: self._lease_name}

    def _check_loss(self, first: int, last: int) -> None:
        missing = int(self._call("lease_missing", first, last))
        if not missing:
            return
        text = (f"actorbus source {self.options.topic}/{self.options.group}: {missing} of "
                f"the {last - first} offsets [{first}, {last}) of this batch are no longer "
                "on the broker (it restarted, or they were acked by another run of this "
                "consumer); their messages cannot be read again")
        if self.options.fail_on_data_loss:
            raise DataLossError(text + ". Set fail_on_data_loss=false to skip them.")
        logger.warning("%s; skipped (fail_on_data_loss=false)", text)

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
