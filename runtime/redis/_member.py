"""How a member reads: a push member's loop (read a batch, run the handler on each
delivery, settle) and the source of a pull subscription."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from runtime.errors import BackendUnavailableError, SettlementError, TopicClosedError
from runtime.redis._delivery import RedisDelivery

__all__ = ["BLOCK", "MemberLoop", "PullSource", "Reader", "run_handler"]

logger = logging.getLogger("runtime")

BLOCK = 0.1
"""Seconds a member's read waits for new entries: how long a stop may take to be seen."""
_BACKOFF = 0.5  # seconds between reads while Redis does not answer
READ_WORK = 0.016
"""Seconds of handler time a member reads at once, once it knows its handler's time (at
most ``prefetch`` deliveries): a slow handler reads few, so competing members share the
end of a backlog instead of one running a large last read while the others wait. Each
read is a round trip with its own fixed cost on both sides (the read and the acks that
ride it), so this is the most a member may run ahead of the others, not the least."""


class Reader(Protocol):
    """What a member loop reads from: a group's `Consumer`, or a broadcast reader."""

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]: ...

    def expired(self, delivery: RedisDelivery[Any]) -> bool: ...

    def give_back(self, deliveries: list[RedisDelivery[Any]]) -> None: ...

    def flush(self, *, due_only: bool = False) -> None: ...


def run_handler(handler: Callable[[Any], Any], delivery: RedisDelivery[Any], auto_ack: bool,
                topic: str) -> None:
    """Run ``handler(delivery)``; a normal return acks with ``auto_ack``, an exception
    nacks a still-pending delivery as ``error`` (logged at WARNING with its traceback)."""
    try:
        handler(delivery)
    except SettlementError as exc:
        logger.warning("topic %s: handler settled %s too late: %s", topic,
                       delivery.message_id, exc)
        return
    except Exception as exc:
        logger.warning("topic %s: handler failed on %s", topic, delivery.message_id,
                       exc_info=True)
        if delivery.pending:
            delivery.fail("n", "error", str(exc), type(exc).__qualname__,
                          "".join(traceback.format_exception(exc)))
        return
    if auto_ack and delivery.pending:
        try:
            delivery.ack()
        except SettlementError as exc:
            logger.warning("topic %s: %s was taken back before its handler returned: %s",
                           topic, delivery.message_id, exc)


def read_count(prefetch: int, cost: float) -> int:
    """How many deliveries to read next: about `READ_WORK` of handler time at ``cost``
    seconds each (the last batch's mean), between 1 and ``prefetch``."""
    if cost <= READ_WORK / prefetch:
        return prefetch
    return max(1, int(READ_WORK / cost))


class MemberLoop:
    """Reads ``reader`` and runs ``handler`` on each delivery until ``stopping`` is set.

    The first read takes one delivery (the handler's time is not known yet); each later
    one about `READ_WORK` of handler time (`read_count`). A delivery that waited in its
    batch too long to start in time (`Reader.expired`) goes back with the rest of the
    batch, unstarted and with no attempt counted (`Reader.give_back`): only what a
    handler ran counts an attempt. The acks of a batch leave with the next read (one
    round trip for both), or sooner once the oldest waited
    `runtime.redis._consumer.FLUSH_AFTER`.

    Args:
        reader: where deliveries come from.
        handler: the subscriber's handler.
        auto_ack: ack on a normal return.
        topic: the topic's name (for logs).
        prefetch: the most deliveries read at once (fewer for a slow handler: `read_count`).
        stopping: set to stop; a batch read but not started is left for the owner to
            hand back.
        running: told each delivery before its handler runs (None after).
    """

    def __init__(self, reader: Reader, handler: Callable[[Any], Any], *, auto_ack: bool,
                 topic: str, prefetch: int, stopping: threading.Event | Any,
                 running: Callable[[RedisDelivery[Any] | None], None] | None = None) -> None:
        self._reader = reader
        self._handler = handler
        self._auto_ack = auto_ack
        self._topic = topic
        self._prefetch = prefetch
        self._stopping = stopping
        self._running = running

    def run(self) -> None:
        """The loop; returns once stopping is set (after the handler running then)."""
        reader, stopping, running = self._reader, self._stopping, self._running
        count = 1
        while not stopping.is_set():
            try:
                deliveries = reader.read(count, BLOCK)
                began = time.monotonic()
                ran = 0
                for delivery in deliveries:
                    if stopping.is_set():
                        break
                    if reader.expired(delivery):
                        reader.give_back(deliveries[ran:])
                        break
                    if running is not None:
                        running(delivery)
                    run_handler(self._handler, delivery, self._auto_ack, self._topic)
                    if running is not None:
                        running(None)
                    ran += 1
                    reader.flush(due_only=True)
                if ran:
                    count = read_count(self._prefetch, (time.monotonic() - began) / ran)
            except BackendUnavailableError as exc:
                logger.warning("topic %s: member waits for Redis: %s", self._topic, exc)
                stopping.wait(_BACKOFF)
            except Exception:  # a refused command (its group deleted): say so, keep trying
                logger.exception("topic %s: member read failed", self._topic)
                stopping.wait(_BACKOFF)


class PullSource:
    """Reads deliveries on demand for `PullSubscription.receive` (one reader at a time).

    Args:
        reader: a group's `Consumer` (acks one call each) or a `BroadcastReader`.
        topic: the topic's name.
        prefetch: entries read per call.
        clock: the time source of ``receive``'s timeout.
    """

    def __init__(self, reader: Reader, topic: str, prefetch: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reader = reader
        self._topic = topic
        self._prefetch = prefetch
        self._clock = clock
        self._ready: deque[RedisDelivery[Any]] = deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def close(self) -> list[RedisDelivery[Any]]:
        """Refuse further reads; return what was read and not received yet."""
        self._closed.set()
        with self._lock:
            left, self._ready = list(self._ready), deque()
        return left

    def receive(self, timeout: float | None) -> RedisDelivery[Any]:
        """The next delivery.

        Raises:
            TimeoutError: none within ``timeout`` seconds.
            TopicClosedError: the topic closed or the subscription ended.
            BackendUnavailableError: Redis did not answer.
        """
        return self.receive_many(1, timeout)[0]

    def receive_many(self, max_messages: int, timeout: float | None) -> list[RedisDelivery[Any]]:
        """Wait for the first delivery, then take up to ``max_messages`` ready ones.

        Raises:
            TimeoutError, TopicClosedError, BackendUnavailableError: as `receive`.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._lock:
            while not self._ready:
                if self._closed.is_set():
                    raise TopicClosedError(self._topic)
                left = BLOCK if deadline is None else deadline - self._clock()
                if left <= 0:
                    raise TimeoutError(f"no delivery on topic {self._topic!r} within {timeout} s")
                self._ready.extend(self._reader.read(max(self._prefetch, max_messages),
                                                     min(left, BLOCK)))
            count = min(max_messages, len(self._ready))
            return [self._ready.popleft() for _ in range(count)]
