"""Flushes waiting for the batches that were outstanding when they were asked for."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field

__all__ = ["FlushBarriers", "wait_flushed"]

# Each slice of an unbounded flush wait: how soon a dead actor is noticed.
_WAIT_SLICE = 1.0


@dataclass(slots=True, kw_only=True)
class _Barrier:
    """A flush waiting for the batches with ids <= ``last_id`` that were outstanding."""

    last_id: int
    remaining: int
    done: Future[None] = field(compare=False)


class FlushBarriers:
    """The Publisher actor's pending flushes (touched on its thread only).

    A flush waits for exactly the batches outstanding when it was asked for: batches
    closed later (a concurrent publisher) never keep it waiting.
    """

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: list[_Barrier] = []  # read-only outside: empty while none waits

    def add(self, done: Future[None], *, last_id: int, outstanding: int) -> None:
        """Resolve ``done`` once the ``outstanding`` batches with ids <= ``last_id`` settle."""
        if outstanding == 0:
            _resolve(done)
            return
        self.waiting.append(_Barrier(last_id=last_id, remaining=outstanding, done=done))

    def settled(self, batch_id: int) -> None:
        """Batch ``batch_id`` settled: count it down; resolve the flushes it completes."""
        waiting = []
        for barrier in self.waiting:
            if batch_id <= barrier.last_id:
                barrier.remaining -= 1
            if barrier.remaining > 0:
                waiting.append(barrier)
            else:
                _resolve(barrier.done)
        self.waiting = waiting

    def release_all(self) -> None:
        """Resolve every pending flush (the Publisher is going away)."""
        for barrier in self.waiting:
            _resolve(barrier.done)
        self.waiting = []


def _resolve(done: Future[None]) -> None:
    try:
        done.set_result(None)
    except InvalidStateError:  # the caller cancelled it
        pass


def wait_flushed(done: Future[None], timeout: float | None, alive: Callable[[], bool]) -> None:
    """Wait for a flush's ``done``; give up early once ``alive()`` is False (the actor is
    gone, nothing would answer).

    Raises:
        TimeoutError: ``timeout`` seconds passed first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = _WAIT_SLICE if deadline is None else deadline - time.monotonic()
        try:
            done.result(timeout=max(0.0, min(remaining, _WAIT_SLICE)))
            return
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"flush did not finish within {timeout} s") from None
            if not alive():
                return
