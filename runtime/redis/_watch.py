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
from runtime.redis._keys import TopicKeys, message_id_of
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
        partitions: the topic's partitions (tailed in turn, one blocking read each).
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, codec: Codec,
                 partitions: int = 1) -> None:
        self._connection = connection
        self._keys = keys
        self._parts = [TopicKeys.of(topic, p) for p in range(partitions)] if partitions > 1 else [keys]
        self._turn = 0
        self._topic = topic
        self._codec = codec
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Outcome]] = {}
        self._unclaimed: OrderedDict[str, Outcome] = OrderedDict()
        self._callback: Callable[[DeadLetter], Any] | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._cursors: dict[str, bytes] = {}
        self._partition_of: dict[str, int] = {}
        with connection.guard():
            pipe = connection.client.pipeline(transaction=False)
            for part in self._parts:
                pipe.xrevrange(part.settled, count=1)
                pipe.xrevrange(part.dead, count=1)
            lasts = pipe.execute()
        for partition, part in enumerate(self._parts):
            settled, dead = lasts[2 * partition], lasts[2 * partition + 1]
            self._cursors[part.settled] = settled[0][0] if settled else b"0-0"
            self._cursors[part.dead] = dead[0][0] if dead else b"0-0"
            self._partition_of[part.settled] = self._partition_of[part.dead] = partition

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
        block = max(int(POLL * 1000) // len(self._parts), 1)
        while not self._stopping.is_set():
            part = self._parts[self._turn]
            self._turn = (self._turn + 1) % len(self._parts)
            streams = {part.settled: self._cursors[part.settled]}
            if self._callback is not None:
                streams[part.dead] = self._cursors[part.dead]
            try:
                with self._connection.guard():
                    reply = self._connection.client.xread(streams, count=1000, block=block)
            except BackendUnavailableError as exc:
                logger.warning("topic %s: outcomes wait for Redis: %s", self._topic, exc)
                self._stopping.wait(POLL * 5)
                continue
            for stream, entries in reply or ():
                name = stream.decode()
                self._cursors[name] = entries[-1][0]
                if name == part.settled:
                    self._settled(entries, self._partition_of[name])
                else:
                    self._dead(entries, self._partition_of[name])

    def _settled(self, entries: list[tuple[bytes, dict[bytes, bytes]]], partition: int) -> None:
        done: list[tuple[Future[Outcome], Outcome]] = []
        with self._lock:
            for _, fields in entries:
                if b"a" in fields:
                    pairs = [(message_id_of(partition, i), ACKED_OUTCOME)
                             for i in fields[b"a"].decode().split(",")]
                else:
                    pairs = [(message_id_of(partition, fields[b"i"].decode()),
                              outcome_of(fields[b"n"]))]
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

    def _dead(self, entries: list[tuple[bytes, dict[bytes, bytes]]], partition: int) -> None:
        callback = self._callback
        if callback is None:
            return
        for entry_id, fields in entries:
            try:
                callback(self._codec.dead_letter(self._topic, entry_id.decode(), fields,
                                                 partition))
            except Exception:
                logger.exception("on_dead_letter callback failed for %s", entry_id)
