"""The publishing process's view of settlements made anywhere: outcomes and dead letters."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from runtime.core._outcome import ACKED_OUTCOME, Outcome
from runtime.core.settlement._dead_letters import DeadLetter
from runtime.errors import BackendUnavailableError
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys
from runtime.redis._records import Codec, outcome_of

__all__ = ["Watch"]

logger = logging.getLogger(__name__)

POLL = 0.1
"""Seconds one read of the settled and dead-letter streams waits: how late an outcome can
resolve after its last settlement, and how long a stop may take."""
_REMEMBERED = 1 << 16  # settled ids kept for a future registered just after its settlement


class Watch:
    """Tails the topic's ``settled`` (and, with a callback, ``dead``) stream in a thread of
    its own, started on first use, and resolves this process's outcome futures.

    A message can settle before its publisher registers the future (the publish script
    returned, a fast member acked): the last `_REMEMBERED` completions nobody waited for
    are kept, so a late registration resolves at once.

    Args:
        connection: the bus's connection.
        keys: the topic's keys.
        topic: the topic's name.
        codec: decodes dead letters for the callback.
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, codec: Codec) -> None:
        self._connection = connection
        self._keys = keys
        self._topic = topic
        self._codec = codec
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Outcome]] = {}
        self._unclaimed: OrderedDict[str, Outcome] = OrderedDict()
        self._callback: Callable[[DeadLetter], Any] | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        with connection.guard():
            pipe = connection.client.pipeline(transaction=False)
            pipe.xrevrange(keys.settled, count=1)
            pipe.xrevrange(keys.dead, count=1)
            settled, dead = pipe.execute()
        self._cursors = {keys.settled: settled[0][0] if settled else b"0-0",
                         keys.dead: dead[0][0] if dead else b"0-0"}

    def expect(self, message_id: str, future: Future[Outcome]) -> None:
        """Resolve ``future`` when ``message_id`` completes."""
        with self._lock:
            done = self._unclaimed.pop(message_id, None)
            if done is None:
                self._futures[message_id] = future
        if done is not None:
            future.set_result(done)
        else:
            self._start()

    def on_dead_letter(self, callback: Callable[[DeadLetter], Any] | None) -> None:
        """Call ``callback`` for each dead letter written from now on (None: off)."""
        self._callback = callback
        if callback is not None:
            self._start()

    def stop(self) -> None:
        """Stop the thread; futures not resolved yet stay pending."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=POLL * 50)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stopping.is_set():
                return
            self._thread = threading.Thread(target=self._run, name=f"redis-watch-{self._topic}",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            streams = {self._keys.settled: self._cursors[self._keys.settled]}
            if self._callback is not None:
                streams[self._keys.dead] = self._cursors[self._keys.dead]
            try:
                with self._connection.guard():
                    reply = self._connection.client.xread(streams, count=1000,
                                                          block=int(POLL * 1000))
            except BackendUnavailableError as exc:
                logger.warning("topic %s: outcomes wait for Redis: %s", self._topic, exc)
                self._stopping.wait(POLL * 5)
                continue
            for stream, entries in reply or ():
                self._cursors[stream.decode()] = entries[-1][0]
                if stream.decode() == self._keys.settled:
                    self._settled(entries)
                else:
                    self._dead(entries)

    def _settled(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        done: list[tuple[Future[Outcome], Outcome]] = []
        with self._lock:
            for _, fields in entries:
                if b"a" in fields:
                    pairs = [(i, ACKED_OUTCOME) for i in fields[b"a"].decode().split(",")]
                else:
                    pairs = [(fields[b"i"].decode(), outcome_of(fields[b"n"]))]
                for message_id, outcome in pairs:
                    future = self._futures.pop(message_id, None)
                    if future is not None:
                        done.append((future, outcome))
                    else:
                        self._unclaimed[message_id] = outcome
            while len(self._unclaimed) > _REMEMBERED:
                self._unclaimed.popitem(last=False)
        for future, outcome in done:
            future.set_result(outcome)

    def _dead(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        callback = self._callback
        if callback is None:
            return
        for entry_id, fields in entries:
            try:
                callback(self._codec.dead_letter(self._topic, entry_id.decode(), fields))
            except Exception:
                logger.exception("on_dead_letter callback failed for %s", entry_id)
