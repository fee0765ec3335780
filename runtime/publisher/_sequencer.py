"""Ordering-key sequencing: one batch in flight per key, strictly in order; paused keys.

Batches of the unkeyed lane (key None) are never held back. A keyed batch goes out only
when the key has nothing in flight; otherwise it waits in the key's queue. A key whose
batch failed is paused: its queue is handed back to be failed, and it stays paused until
`KeySequencer.resume`.
"""

from __future__ import annotations

from collections import deque

from runtime.publisher._batching import Batch

__all__ = ["KeySequencer"]


class KeySequencer:
    """Per-key order and pause state for the Publisher actor (not thread-safe)."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Batch]] = {}
        self._paused: frozenset[str] = frozenset()

    @property
    def paused(self) -> frozenset[str]:
        """The paused keys (a snapshot: safe to hand to other threads)."""
        return self._paused

    def is_paused(self, key: str) -> bool:
        """True while ``key`` is paused."""
        return key in self._paused

    def submit(self, batch: Batch) -> Batch | None:
        """Offer a closed batch; return it if it may go out now, else queue it."""
        key = batch.key
        if key is None:
            return batch
        queue = self._queues.get(key)
        if queue is None:
            # The key is idle: an empty queue marks it busy from now on.
            self._queues[key] = deque()
            return batch
        queue.append(batch)
        return None

    def complete(self, key: str) -> Batch | None:
        """The key's in-flight batch succeeded; return its next batch to send, if any."""
        queue = self._queues.get(key)
        if not queue:
            self._queues.pop(key, None)
            return None
        return queue.popleft()

    def pause(self, key: str) -> list[Batch]:
        """The key's in-flight batch failed: pause it and return its queued batches."""
        self._paused = self._paused | {key}
        return list(self._queues.pop(key, ()))

    def resume(self, key: str) -> bool:
        """Lift the pause on ``key``; False (and nothing changes) if it was not paused."""
        if key not in self._paused:
            return False
        self._paused = self._paused - {key}
        return True

    def drain(self) -> list[Batch]:
        """Forget every queued batch and return them (the Publisher is stopping)."""
        queued = [batch for queue in self._queues.values() for batch in queue]
        self._queues.clear()
        return queued
