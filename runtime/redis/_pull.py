"""The source of a pull subscription on a Redis topic: a consumer or a broadcast reader."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from runtime.errors import TopicClosedError
from runtime.redis._delivery import RedisDelivery
from runtime.redis._member import BLOCK, Reader

__all__ = ["PullSource"]


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
