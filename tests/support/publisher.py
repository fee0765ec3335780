"""Shared helpers of the Publisher tests: a fake topic that records every batch it gets.

The fake implements the seam a real topic offers a Publisher: ``name`` and
``_publish_batches(parts) -> Future[list[(ids, error)]]``, each batch through
``_publish_batch(messages)`` (which tests override to watch single batches). It confirms
at once, or holds batches until the test confirms or fails them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from runtime.core._message import Message, new_message
from runtime.core._topic_actor import BatchOutcome, Parts
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowGate

LONG = 60.0  # seconds: a batch latency no test waits for


def batching(**overrides: float) -> BatchSettings:
    """Batch settings whose latency never fires unless a test sets it."""
    return BatchSettings(**{"max_latency": LONG, **overrides})  # type: ignore[arg-type]


def _outcome(batch: Future[list[str]]) -> BatchOutcome:
    error = batch.exception()
    return (None, error) if error is not None else (batch.result(), None)


class FakeTopic:
    """Records batches (lists of messages) and resolves their futures with fresh ids."""

    def __init__(self, name: str = "fake", *, hold: bool = False) -> None:
        self.name = name
        self.hold = hold
        self.fail_with: BaseException | None = None
        self.batches: list[list[Message]] = []
        self.received_at: list[float] = []
        self.held: list[tuple[list[Message], Future[list[str]]]] = []
        self._ids = itertools.count(1)
        self._condition = threading.Condition()

    def _publish_batches(self, parts: Sequence[Parts]) -> Future[list[BatchOutcome]]:
        """Each batch through `_publish_batch`; one future once all of them settled."""
        batches = [self._publish_batch(list(map(new_message, *part))) for part in parts]
        outcomes: Future[list[BatchOutcome]] = Future()
        left = [len(batches)]
        lock = threading.Lock()

        def one_done(_: Future[list[str]]) -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            outcomes.set_result([_outcome(batch) for batch in batches])

        for batch in batches:
            batch.add_done_callback(one_done)
        return outcomes

    def _publish_batch(self, messages: list[Message]) -> Future[list[str]]:
        future: Future[list[str]] = Future()
        with self._condition:
            self.batches.append(list(messages))
            self.received_at.append(time.monotonic())
            hold = self.hold
            if hold:
                self.held.append((messages, future))
            self._condition.notify_all()
        if not hold:
            self._settle(messages, future, self.fail_with)
        return future

    def stop_holding(self) -> None:
        """Confirm every held batch, and every later one at once."""
        with self._condition:
            self.hold = False
            held, self.held = self.held, []
        for messages, future in held:
            self._settle(messages, future, None)

    def _settle(
        self, messages: list[Message], future: Future[list[str]], error: BaseException | None
    ) -> None:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result([f"{self.name}-{next(self._ids)}" for _ in messages])

    def confirm(self, count: int = 1) -> None:
        """Confirm the oldest ``count`` held batches."""
        for messages, future in self._pop(count):
            self._settle(messages, future, None)

    def fail(self, error: BaseException, count: int = 1) -> None:
        """Fail the oldest ``count`` held batches with ``error``."""
        for messages, future in self._pop(count):
            self._settle(messages, future, error)

    def wait_for_batches(self, count: int, timeout: float = 5.0) -> list[list[Message]]:
        """Block until at least ``count`` batches arrived; return them all."""
        with self._condition:
            if not self._condition.wait_for(lambda: len(self.batches) >= count, timeout):
                raise AssertionError(f"expected {count} batches, got {len(self.batches)}")
            return list(self.batches)

    def wait_for_held(self, count: int, timeout: float = 5.0) -> None:
        """Block until at least ``count`` batches are held."""
        with self._condition:
            if not self._condition.wait_for(lambda: len(self.held) >= count, timeout):
                raise AssertionError(f"expected {count} held batches, got {len(self.held)}")

    def datas(self) -> list[list[bytes]]:
        """The data of every message, batch by batch."""
        with self._condition:
            return [[m.data for m in batch] for batch in self.batches]

    def _pop(self, count: int) -> list[tuple[list[Message], Future[list[str]]]]:
        with self._condition:
            taken, self.held = self.held[:count], self.held[count:]
        return taken


class Threads:
    """Runs gate acquires in threads; each result is a future (None or the raised error)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def acquire(
        self, gate: FlowGate, size: int, on_block: Callable[[], None] | None = None
    ) -> Future[None]:
        result: Future[None] = Future()

        def run() -> None:
            try:
                gate.acquire(size, on_block=on_block)
            except BaseException as exc:
                result.set_exception(exc)
            else:
                result.set_result(None)

        thread = threading.Thread(target=run)
        self.threads.append(thread)
        thread.start()
        return result

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=5.0)


def wait_for_waiters(gate: FlowGate, count: int) -> None:
    """Until ``count`` acquires block on ``gate`` (bounded: five seconds)."""
    event = threading.Event()
    for _ in range(500):
        if gate.waiting >= count:
            return
        event.wait(0.01)
    raise AssertionError(f"expected {count} waiters, have {gate.waiting}")
