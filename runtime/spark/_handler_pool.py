"""`SparkHandlerPool`: a group member on the driver whose handler runs on executors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from runtime.core.settlement._claims import fail_delivery
from runtime.errors import WouldBlock

__all__ = ["SparkHandlerPool"]

# A receive waits at most this long, so max_messages and idle_timeout are checked often.
_RECEIVE_SLICE = 1.0


def _apply(handler: Callable[[Any], object]) -> Callable[[Iterable[tuple[int, Any]]], Iterator[Any]]:
    """The per-partition function Spark runs: (index, error text or None) per message."""

    def run(items: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, str | None]]:
        for index, message in items:
            try:
                handler(message)
            except Exception as exc:  # the handler's failure is the message's outcome
                yield index, str(exc) or type(exc).__qualname__
            else:
                yield index, None

    return run


class SparkHandlerPool:
    """Runs a handler over a balanced group's messages on Spark executors.

    The driver joins ``group`` of ``topic`` as one member (a pull subscription on
    ``source``, a `Bus` or a `RemoteBus`), takes up to ``chunk_size`` messages at a
    time, and runs ``handler(message)`` for each on the executors. A normal return
    acks the message; an exception settles it like a raising handler (category
    ``"error"`` with the exception's text: redelivered while attempts remain, then
    dead-lettered).

    Args:
        spark: the `SparkSession`.
        source: a `Bus` or `RemoteBus` serving ``topic``.
        topic: the topic's name.
        group: the balanced group to join.
        chunk_size: messages per Spark job.
    """

    def __init__(self, spark: Any, source: Any, *, topic: str, group: str, chunk_size: int = 5000) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
        self._spark = spark
        self._source = source
        self._topic = topic
        self._group = group
        self._chunk_size = chunk_size

    def run(
        self, handler: Callable[[Any], object], *, max_messages: int | None = None,
        idle_timeout: float | None = None,
    ) -> int:
        """Handle messages until ``max_messages`` were handled or the group stayed empty
        for ``idle_timeout`` seconds (both None: until interrupted); returns the count.

        Blocks. Raises what Spark raises when a job fails; that chunk is then nacked.
        """
        subscription = self._source.topic(self._topic).subscription(group=self._group)
        handled = 0
        try:
            while max_messages is None or handled < max_messages:
                room = self._chunk_size if max_messages is None else min(
                    self._chunk_size, max_messages - handled)
                chunk = _take(subscription, room, idle_timeout)
                if not chunk:
                    break
                handled += self._handle(handler, chunk)
        finally:
            subscription.unsubscribe()
        return handled

    def _handle(self, handler: Callable[[Any], object], chunk: list[Any]) -> int:
        context = self._spark.sparkContext
        items = [(index, delivery.message) for index, delivery in enumerate(chunk)]
        slices = max(1, min(len(items), context.defaultParallelism))
        try:
            outcomes = context.parallelize(items, slices).mapPartitions(_apply(handler)).collect()
        except BaseException as exc:
            reason = f"spark job failed: {exc}"
            for delivery in chunk:
                _settle(lambda d=delivery: d.nack(reason))  # type: ignore[misc]
            raise
        for index, error in outcomes:
            delivery = chunk[index]
            if error is None:
                _settle(delivery.ack)
            else:
                _settle(lambda d=delivery, e=error: fail_delivery(d, e))  # type: ignore[misc]
        return len(outcomes)


def _take(subscription: Any, room: int, idle_timeout: float | None) -> list[Any]:
    """Up to ``room`` deliveries: wait for the first (bounded by idle_timeout), take the rest."""
    deadline = None if idle_timeout is None else time.monotonic() + idle_timeout
    chunk: list[Any] = []
    while not chunk:
        wait = _RECEIVE_SLICE if deadline is None else min(deadline - time.monotonic(), _RECEIVE_SLICE)
        if wait < 0:
            return []
        try:
            chunk.append(subscription.receive(timeout=wait))
        except TimeoutError:
            continue
    while len(chunk) < room:
        try:
            chunk.append(subscription.receive_nowait())
        except WouldBlock:
            break
    return chunk


def _settle(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # settled meanwhile (ack deadline, topic closed): nothing to undo
        pass
