"""Staged publishing: rows become visible once per (producer id, batch id).

Spark's write tasks stage their rows under (producer, batch, part) — ``part`` names
the task attempt, so a retried or speculative task stages beside the failed one instead
of mixing with it. The driver then commits the parts that succeeded: the rows of those
parts are published once, and the (producer, batch) pair is remembered, so a repeated
commit (a replayed micro-batch, a re-run of the same batch id) is a no-op.

Invariants:
- a commit publishes the listed parts exactly once, or not at all: when publishing
  raises, the stage is kept and the commit can be retried;
- ``abort`` drops a batch's stages; stages untouched for ``ttl`` seconds (their writer
  died before committing or aborting) expire;
- the last ``remember`` committed batch ids of each producer are kept.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["StagingArea"]

T = TypeVar("T")

DEFAULT_TTL = 600.0
DEFAULT_REMEMBER = 10_000


@dataclass(slots=True, kw_only=True)
class _Stage(Generic[T]):
    parts: dict[Hashable, T] = field(default_factory=dict)
    touched: float = 0.0
    committing: bool = False


class StagingArea(Generic[T]):
    """Stages keyed by (producer, batch); thread-safe.

    Args:
        ttl: seconds after its last `stage` call when an uncommitted stage expires.
        remember: committed batch ids kept per producer (the no-op window).
        clock: the time source of expiry.
    """

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL,
        remember: int = DEFAULT_REMEMBER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._remember = remember
        self._clock = clock
        self._lock = threading.Lock()
        self._stages: dict[tuple[Hashable, str], _Stage[T]] = {}
        self._committed: dict[Hashable, OrderedDict[str, None]] = {}

    def stage(self, producer: Hashable, batch: str, part: Hashable, rows: T) -> bool:
        """Stage ``rows`` as ``part`` of (producer, batch); a repeated part replaces it.

        Returns False (and stages nothing) when that batch is already committed.
        """
        with self._lock:
            if self._is_committed(producer, batch):
                return False
            stage = self._stages.setdefault((producer, batch), _Stage())
            stage.parts[part] = rows
            stage.touched = self._clock()
            return True

    def commit(
        self, producer: Hashable, batch: str, parts: Sequence[Hashable], publish: Callable[[list[T]], None]
    ) -> bool:
        """Publish the listed parts of (producer, batch) once; return whether it did.

        ``publish`` gets the staged rows of ``parts`` in the order given (a part never
        staged counts as empty). A committed batch, or one being committed right now,
        returns False. When ``publish`` raises, nothing is marked and the error
        propagates: the commit can be retried.

        Raises:
            Exception: whatever ``publish`` raised.
        """
        with self._lock:
            if self._is_committed(producer, batch):
                return False
            stage = self._stages.setdefault((producer, batch), _Stage())
            if stage.committing:
                return False
            stage.committing = True
            rows = [stage.parts[part] for part in parts if part in stage.parts]
        try:
            publish(rows)
        except BaseException:
            with self._lock:
                stage.committing = False
                stage.touched = self._clock()
            raise
        with self._lock:
            self._stages.pop((producer, batch), None)
            self._mark_committed(producer, batch)
        return True

    def abort(self, producer: Hashable, batch: str) -> int:
        """Drop every stage of (producer, batch); return how many parts were dropped."""
        with self._lock:
            stage = self._stages.get((producer, batch))
            if stage is None or stage.committing:
                return 0
            del self._stages[(producer, batch)]
            return len(stage.parts)

    def expire(self) -> int:
        """Drop stages untouched for ``ttl`` seconds; return how many batches went."""
        with self._lock:
            horizon = self._clock() - self._ttl
            old = [
                key for key, stage in self._stages.items()
                if stage.touched <= horizon and not stage.committing
            ]
            for key in old:
                del self._stages[key]
            return len(old)

    def is_committed(self, producer: Hashable, batch: str) -> bool:
        """Whether (producer, batch) was committed (within the remembered window)."""
        with self._lock:
            return self._is_committed(producer, batch)

    def staged(self) -> int:
        """How many (producer, batch) stages wait for a commit or an abort."""
        with self._lock:
            return len(self._stages)

    def _is_committed(self, producer: Hashable, batch: str) -> bool:
        return batch in self._committed.get(producer, ())

    def _mark_committed(self, producer: Hashable, batch: str) -> None:
        done = self._committed.setdefault(producer, OrderedDict())
        done[batch] = None
        while len(done) > self._remember:
            done.popitem(last=False)
