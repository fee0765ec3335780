"""Publisher batching: settings and the accumulation of messages into batches.

A `Batcher` keeps at most one open batch per lane (an ordering key, or None for the
unkeyed lane) and closes it when any threshold is reached:

- the Nth message (exactly ``max_messages``);
- ``max_bytes``: a message that would push the open batch past it closes the open batch
  first and starts a new one; a batch that reaches it exactly (or a lone message above
  it) closes at once;
- ``max_latency`` after the batch's first message (`due`), or at once when it is 0.

The Batcher is plain state with an injected clock; the Publisher actor drives it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.errors import PublishError
from runtime.publisher._intake import Accepted, Slice

__all__ = ["Batch", "BatchSettings", "Batcher"]

def _invalid(setting: str, detail: str, value: object) -> PublishError:
    return PublishError(f"Invalid batch setting {setting}: {detail}, got {value!r}", 3)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSettings:
    """When a Publisher sends what it has accumulated.

    Attributes:
        max_messages: a batch goes out when it holds this many messages (>= 1).
        max_bytes: a batch goes out when its ``Message.size`` total reaches this (>= 1).
        max_latency: a batch goes out at most this many seconds after its first
            message (finite, >= 0; 0 sends every message at once).

    Raises:
        PublishError: code 3 when a value is out of range.
    """

    max_messages: int = 100
    max_bytes: int = 1024 * 1024
    max_latency: float = 0.010

    def __post_init__(self) -> None:
        if not _is_int(self.max_messages) or self.max_messages < 1:
            raise _invalid("max_messages", "must be an int >= 1", self.max_messages)
        if not _is_int(self.max_bytes) or self.max_bytes < 1:
            raise _invalid("max_bytes", "must be an int >= 1", self.max_bytes)
        latency = self.max_latency
        if (
            isinstance(latency, bool) or not isinstance(latency, int | float)
            or not math.isfinite(latency) or latency < 0
        ):
            raise _invalid("max_latency", "must be a finite number >= 0", latency)


class Batch:
    """Messages of one lane that go to the topic together, with where their ids go.

    The messages are kept as parallel lists (data, attributes, ordering key), the form
    the topic takes a batch in (`_publish_batches`). Their ids go to the `Slice` of each
    run the batch holds.

    Attributes:
        id: unique per Batcher, increasing in creation order.
        key: the lane: an ordering key, or None.
        created_at: the clock reading when the first message arrived.
        slices: where the messages' ids go, in publish order.
        size: the sum of the messages' sizes.
    """

    __slots__ = ("attributes", "created_at", "datas", "id", "key", "keys", "size", "slices")

    def __init__(self, *, id: int, key: str | None, created_at: float) -> None:
        self.id = id
        self.key = key
        self.created_at = created_at
        self.datas: list[bytes] = []
        self.attributes: list[dict[str, str]] = []
        self.keys: list[str | None] = []
        self.slices: list[Slice] = []
        self.size = 0

    def __len__(self) -> int:
        return len(self.datas)

    def __repr__(self) -> str:
        return f"Batch(id={self.id}, key={self.key!r}, messages={len(self)}, size={self.size})"


class Batcher:
    """Open batches, one per lane, closed by count, bytes and latency thresholds.

    Args:
        settings: the thresholds.
        clock: the time source for ``max_latency``.
    """

    def __init__(self, settings: BatchSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._last_id = 0
        # Insertion order is creation order, so deadlines ascend along the dict.
        self._open: dict[str | None, Batch] = {}

    @property
    def settings(self) -> BatchSettings:
        """The thresholds in force."""
        return self._settings

    @property
    def last_id(self) -> int:
        """The id of the newest batch (0 before the first)."""
        return self._last_id

    def __len__(self) -> int:
        """The number of open batches."""
        return len(self._open)

    def open_messages(self) -> int:
        """The messages waiting in open batches."""
        return sum(len(batch) for batch in self._open.values())

    def add(self, key: str | None, runs: list[Accepted]) -> list[Batch]:
        """Add runs of messages, in order, to one lane; return the batches they closed,
        in order."""
        settings = self._settings
        per_batch = 1 if settings.max_latency <= 0 else settings.max_messages
        max_bytes = settings.max_bytes
        closed: list[Batch] = []
        batch = self._open.get(key)
        for run in runs:
            datas, attributes, run_key, sink, first, sizes = run
            start, count = 0, len(sizes)
            while start < count:
                if batch is None:
                    self._last_id += 1
                    batch = self._open[key] = Batch(id=self._last_id, key=key,
                                                    created_at=self._clock())
                end = min(count, start + per_batch - len(batch.datas))
                whole = end - start == count
                size = sum(sizes) if whole else sum(sizes[start:end])
                if size >= max_bytes - batch.size:  # a byte threshold falls in the slice
                    end, size = _fit(sizes, start, end, max_bytes - batch.size,
                                     empty=not batch.datas)
                    whole = end - start == count
                if end > start:  # the messages start to end - 1 join the batch
                    batch.datas += datas if whole else datas[start:end]
                    batch.attributes += (attributes,) * (end - start)
                    batch.keys += (run_key,) * (end - start)
                    batch.slices.append((sink, first + start, end - start))
                    batch.size += size
                    start = end
                if start < count or len(batch.datas) >= per_batch or batch.size >= max_bytes:
                    del self._open[key]  # full, or the next message would overflow it
                    closed.append(batch)
                    batch = None
        return closed

    def due(self) -> list[Batch]:
        """Close and return every open batch whose latency has passed, oldest first."""
        limit = self._clock() - self._settings.max_latency
        closed: list[Batch] = []
        for batch in self._open.values():
            if batch.created_at > limit:
                break
            closed.append(batch)
        for batch in closed:
            del self._open[batch.key]
        return closed

    def next_deadline(self) -> float | None:
        """When the oldest open batch is due, or None with nothing open."""
        for batch in self._open.values():
            return batch.created_at + self._settings.max_latency
        return None

    def drain(self) -> list[Batch]:
        """Close and return every open batch, oldest first."""
        closed = list(self._open.values())
        self._open.clear()
        return closed

    def take(self, key: str | None) -> Batch | None:
        """Remove and return the open batch of ``key`` without closing it normally."""
        return self._open.pop(key, None)

    def update(self, settings: BatchSettings) -> list[Batch]:
        """Apply new thresholds; close and return the open batches that now reach one."""
        self._settings = settings
        full = [
            batch for batch in self._open.values()
            if len(batch) >= settings.max_messages
            or batch.size >= settings.max_bytes
            or settings.max_latency <= 0
        ]
        for batch in full:
            del self._open[batch.key]
        return full


def _fit(sizes: Sequence[int], start: int, end: int, room: int, *, empty: bool) -> tuple[int, int]:
    """Where a batch with ``room`` bytes left ends, from ``start`` (at most ``end``), and
    the bytes it takes: before the first message that would overflow it, or after the
    one that fills it exactly. An ``empty`` batch takes a lone oversized message."""
    total = 0
    for index in range(start, end):
        size = sizes[index]
        if total + size > room and not (empty and index == start):
            return index, total
        total += size
        if total >= room:
            return index + 1, total
    return end, total
