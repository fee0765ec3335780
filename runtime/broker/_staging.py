"""Staged publishing: rows become visible once per (producer id, batch id).

Spark's write tasks stage their rows under (producer, batch, part) — ``part`` names
the task attempt, so a retried or speculative task stages beside the failed one instead
of mixing with it. The driver then commits the parts that succeeded: the rows of those
parts are published once, and the (producer, batch) pair is remembered, so a repeated
commit (a replayed micro-batch, a re-run of the same batch id) is a no-op.

Invariants:
- a commit is applied once or not at all: its rows are handed to the topic by one
  call only (``submit``); a commit that gives up waiting for them (a topic applying
  backpressure) leaves them in flight, and any later commit of that batch waits for
  the same outcome and reports it — it never hands them over again. Only a ``submit``
  that raised (nothing handed over) leaves the stage for a retry;
- a batch's outcome, once known, is final: a later commit returns False after a
  success and raises the same error after a failure;
- a stage in flight takes no more parts, and ``abort`` and expiry leave it alone;
- ``abort`` drops a batch's stages; stages untouched for ``ttl`` seconds (their writer
  died before committing or aborting) expire;
- what one producer holds staged (its parts' ``size``, until committed, aborted or
  expired) stays within ``StagingLimits.max_producer_bytes``, one part within
  ``max_part_bytes``: a stage call past either is refused (`NotTransferableError`),
  the connection stays usable;
- the last ``remember`` committed batch ids of each producer are kept.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from runtime.broker._wire import NotTransferableError

__all__ = ["DEFAULT_LIMITS", "StagingArea", "StagingLimits", "settled_together"]

T = TypeVar("T")

DEFAULT_TTL = 600.0
DEFAULT_REMEMBER = 10_000
# Decoded bytes: a Spark sink part is at most 50,000 rows, and a producer holds its
# whole batch staged until the commit. Higher bounds let bigger batches through and
# let one peer make the broker hold more.
DEFAULT_MAX_PART_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_PRODUCER_BYTES = 2 * 1024 * 1024 * 1024

# submit's return: the outcome of the rows handed over, and how many rows they are.
Submitted = tuple["Future[Any]", int]


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingLimits:
    """Bounds of what peers may stage, in decoded bytes (`StagedRows.size`).

    Args:
        max_part_bytes: one stage call's rows.
        max_producer_bytes: all one producer of a topic holds staged, over its batches.

    Raises:
        ValueError: a bound that is not a positive int.
    """

    max_part_bytes: int = DEFAULT_MAX_PART_BYTES
    max_producer_bytes: int = DEFAULT_MAX_PRODUCER_BYTES

    def __post_init__(self) -> None:
        for name in ("max_part_bytes", "max_producer_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = StagingLimits()


@dataclass(slots=True, kw_only=True)
class _Stage(Generic[T]):
    parts: dict[Hashable, T] = field(default_factory=dict)
    sizes: dict[Hashable, int] = field(default_factory=dict)
    touched: float = 0.0
    # Set once its commit hands the rows over (or is about to): the batch is in flight.
    outcome: Future[Any] | None = None
    rows: int = 0


def settled_together(futures: Sequence[Future[Any]]) -> Future[None]:
    """One future that resolves once every one of ``futures`` did: None when all
    succeeded, else the first failure in their order."""
    together: Future[None] = Future()
    if not futures:
        together.set_result(None)
        return together
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        if failed is None:
            together.set_result(None)
        else:
            together.set_exception(failed)

    for future in futures:
        future.add_done_callback(one_done)
    return together


class StagingArea(Generic[T]):
    """Stages keyed by (producer, batch); thread-safe.

    Args:
        ttl: seconds after its last `stage` call when an uncommitted stage expires.
        remember: committed batch ids kept per producer (the no-op window).
        limits: the bounds of what is staged.
        clock: the time source of expiry.
    """

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL,
        remember: int = DEFAULT_REMEMBER,
        limits: StagingLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._remember = remember
        self._limits = DEFAULT_LIMITS if limits is None else limits
        self._clock = clock
        self._lock = threading.Lock()
        self._stages: dict[tuple[Hashable, str], _Stage[T]] = {}
        self._held: dict[Hashable, int] = {}  # per producer: the sizes of its stages
        # Per producer, its last committed batches and their outcome (None: published).
        self._committed: dict[Hashable, OrderedDict[str, BaseException | None]] = {}

    def stage(self, producer: Hashable, batch: str, part: Hashable, rows: T, size: int = 0) -> bool:
        """Stage ``rows`` (``size`` bytes) as ``part`` of (producer, batch); a repeated
        part replaces it.

        Returns False (and stages nothing) when that batch is committed or in flight.

        Raises:
            NotTransferableError: ``size`` is over the part limit, or would take the
                producer over its limit (nothing staged).
        """
        if size > self._limits.max_part_bytes:
            raise NotTransferableError("stage", (
                f"its rows decode to about {size:,} bytes, over the limit of "
                f"{self._limits.max_part_bytes:,} bytes per part (stage fewer rows per call)"))
        with self._lock:
            if self._is_committed(producer, batch):
                return False
            stage = self._stages.setdefault((producer, batch), _Stage())
            if stage.outcome is not None:
                return False
            held = self._held.get(producer, 0) - stage.sizes.get(part, 0) + size
            if held > self._limits.max_producer_bytes:
                if not stage.parts:
                    del self._stages[(producer, batch)]
                raise NotTransferableError("stage", (
                    f"producer {producer!r} would hold about {held:,} bytes staged, over its "
                    f"limit of {self._limits.max_producer_bytes:,} (commit or abort its "
                    "batches first)"))
            self._held[producer] = held
            stage.parts[part] = rows
            stage.sizes[part] = size
            stage.touched = self._clock()
            return True

    def commit(
        self, producer: Hashable, batch: str, parts: Sequence[Hashable],
        submit: Callable[[list[T]], Submitted], wait: Callable[[Future[Any], int], object],
    ) -> bool:
        """Publish the listed parts of (producer, batch) once; True when this call saw
        them published, False when an earlier commit had reported it.

        The first commit calls ``submit`` with the staged rows of ``parts`` in the order
        given (a part never staged counts as empty): it hands them to the topic without
        blocking and returns their outcome and count. Every commit of the batch then
        blocks in ``wait`` (which bounds the wait) until that outcome is known; a
        commit of a batch in flight waits for the same outcome, it never submits again.

        Raises:
            Exception: whatever ``submit`` raised (nothing was handed over: the commit
                can be retried), ``wait`` raised (a timeout: the rows stay in flight), or
                the batch's rows failed with (also on every later commit).
        """
        rows: list[T] | None = None
        with self._lock:
            if self._is_committed(producer, batch):
                return self._reported(producer, batch)
            stage = self._stages.setdefault((producer, batch), _Stage())
            outcome = stage.outcome
            if outcome is None:  # the first commit: it hands the rows over
                outcome = stage.outcome = Future()
                rows = [stage.parts[part] for part in parts if part in stage.parts]
        if rows is not None:
            self._submit(producer, batch, stage, outcome, rows, submit)
        wait(outcome, stage.rows)
        outcome.result(timeout=0)  # raises what the rows failed with
        return True

    def _submit(
        self, producer: Hashable, batch: str, stage: _Stage[T], outcome: Future[Any],
        rows: list[T], submit: Callable[[list[T]], Submitted],
    ) -> None:
        try:
            handed, count = submit(rows)
        except BaseException as exc:
            with self._lock:  # nothing handed over: the batch may be committed again
                stage.outcome = None
                stage.touched = self._clock()
            outcome.set_exception(exc)
            raise
        with self._lock:
            stage.rows = count
            stage.parts = {}  # the topic holds them now (their sizes count until settled)
        handed.add_done_callback(lambda done: self._settle(producer, batch, done, outcome))

    def _settle(self, producer: Hashable, batch: str, done: Future[Any], outcome: Future[Any]) -> None:
        """Record a batch's outcome once its rows settled (in the thread that settled them)."""
        error = done.exception()
        with self._lock:
            self._drop(producer, batch)
            self._mark_committed(producer, batch, error)
        if error is None:
            outcome.set_result(None)
        else:
            outcome.set_exception(error)

    def abort(self, producer: Hashable, batch: str) -> int:
        """Drop every stage of (producer, batch); return how many parts were dropped
        (none of a batch in flight)."""
        with self._lock:
            stage = self._stages.get((producer, batch))
            if stage is None or stage.outcome is not None:
                return 0
            self._drop(producer, batch)
            return len(stage.parts)

    def expire(self) -> int:
        """Drop stages untouched for ``ttl`` seconds; return how many batches went."""
        with self._lock:
            horizon = self._clock() - self._ttl
            old = [
                key for key, stage in self._stages.items()
                if stage.touched <= horizon and stage.outcome is None
            ]
            for producer, batch in old:
                self._drop(producer, batch)
            return len(old)

    def is_committed(self, producer: Hashable, batch: str) -> bool:
        """Whether (producer, batch) was committed (within the remembered window)."""
        with self._lock:
            return self._is_committed(producer, batch)

    def staged(self) -> int:
        """How many (producer, batch) stages wait for a commit or an abort."""
        with self._lock:
            return len(self._stages)

    def held(self, producer: Hashable) -> int:
        """The bytes ``producer`` holds staged (its parts' sizes)."""
        with self._lock:
            return self._held.get(producer, 0)

    def _drop(self, producer: Hashable, batch: str) -> None:
        stage = self._stages.pop((producer, batch), None)
        if stage is None:
            return
        held = self._held.get(producer, 0) - sum(stage.sizes.values())
        if held > 0:
            self._held[producer] = held
        else:
            self._held.pop(producer, None)

    def _is_committed(self, producer: Hashable, batch: str) -> bool:
        return batch in self._committed.get(producer, ())

    def _reported(self, producer: Hashable, batch: str) -> bool:
        error = self._committed[producer][batch]
        if error is not None:
            raise error
        return False

    def _mark_committed(self, producer: Hashable, batch: str, error: BaseException | None) -> None:
        done = self._committed.setdefault(producer, OrderedDict())
        done[batch] = error
        while len(done) > self._remember:
            done.popitem(last=False)
