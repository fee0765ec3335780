"""Handlers the Redis tests run in worker processes (importable by name there)."""

from __future__ import annotations

import os
import signal
from typing import Any

import redis


class Recorder:
    """Records each message it acks in a Redis hash (``message -> pid``) and, once, kills
    its own process (SIGKILL) on the message ``crash_on``.

    Args:
        url: the Redis to record in.
        key: the hash.
        crash_on: the message whose first attempt kills the worker (None: never).
    """

    def __init__(self, url: str, key: str, crash_on: Any = None) -> None:
        self.url = url
        self.key = key
        self.crash_on = crash_on
        self._client: redis.Redis | None = None

    def __call__(self, delivery: Any) -> None:
        if self._client is None:
            self._client = redis.Redis.from_url(self.url)
        if delivery.message == self.crash_on and delivery.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        self._client.hincrby(self.key, f"{delivery.message}", 1)
        self._client.hset(f"{self.key}:pid", f"{delivery.message}", os.getpid())
        delivery.ack()
