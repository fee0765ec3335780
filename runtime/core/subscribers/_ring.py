"""The topic's broadcast ring: a fixed number of entries and one cursor per subscriber."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from runtime.core._envelope import Envelope
from runtime.errors import TopicClosedError, WouldBlock

__all__ = ["Ring"]

Wake = Callable[[], None]
# Entries replayed to one subscriber (`Ring.replay`), with the attempt each one is.
Replays = tuple[list[Envelope], list[int]]


class Ring:
    """Exactly ``capacity`` entries; each broadcast subscriber reads from its own cursor.

    Positions count writes from 0; position ``p`` lives in slot ``p % capacity``. A
    subscriber never lags more than a ring. With ``blocking`` (``broadcast_on_lag="block"``)
    a writer first waits in `wait_room_locked` until every subscriber has read what the
    write would overwrite; otherwise a write that would overwrite an entry a subscriber
    has not read moves its cursor past it and reports the entry as lagged. Writers hold
    `lock` while they wait, reserve and write (waiting releases it), so the subscribers
    counted for a message are exactly those that will read or lag it.

    Args:
        capacity: the topic's ``broadcast_capacity``.
        topic: the topic's name (for errors).
        blocking: whether writers wait for the slowest subscriber instead of lagging it.
    """

    def __init__(self, capacity: int, topic: str, *, blocking: bool = False) -> None:
        self.capacity = capacity
        self.blocking = blocking
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)
        self.topic = topic
        self._slots: list[Envelope | None] = [None] * capacity
        self._head = 0
        self._cursors: dict[int, int] = {}
        # How many subscribers read the ring (read with `lock` held for a stable answer).
        self.subscriber_count = 0
        self._wakes: dict[int, Wake | None] = {}
        self._idle: dict[int, Wake] = {}
        self._pulling = 0
        self._writers = 0  # writers waiting for room: readers wake them as they advance
        # Dead letters replayed to one subscriber, read before its next ring entry.
        self._replays: dict[int, deque[tuple[Envelope, int]]] = {}
        self._closed = False

    def slowest(self) -> tuple[int, int] | None:
        """The subscriber furthest behind and how many entries it has not read; None: none."""
        with self.lock:
            cursors = self._cursors
            if not cursors:
                return None
            subscriber_id = min(cursors, key=cursors.__getitem__)
            return subscriber_id, self._head - cursors[subscriber_id]

    def would_lag(self, count: int) -> bool:
        """Whether writing ``count`` entries now would overwrite unread ones (a hint)."""
        floor = self._head + count - self.capacity
        cursors = self._cursors
        return floor > 0 and bool(cursors) and min(cursors.values()) < floor

    def wait_room_locked(self, count: int, deadline: float | None) -> None:
        """Wait (`lock` held) until ``count`` entries fit without overwriting unread ones.

        ``count`` is capped at the capacity. Blocks until ``deadline``
        (``time.monotonic()`` based; None: unbounded).

        Raises:
            WouldBlock: the deadline passed first; the text names the slowest subscriber.
            TopicClosedError: the topic closed (also while waiting).
        """
        count = min(count, self.capacity)
        while True:
            if self._closed:
                raise TopicClosedError(self.topic)
            floor = self._head + count - self.capacity
            cursors = self._cursors
            if floor <= 0 or not cursors:
                return
            slowest = min(cursors, key=cursors.__getitem__)
            if cursors[slowest] >= floor:
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WouldBlock(
                    f"broadcast subscriber {slowest} of topic {self.topic!r} is a whole ring "
                    f"({self.capacity} entries, broadcast_capacity) behind"
                )
            self._writers += 1
            try:
                self._changed.wait(remaining)
            finally:
                self._writers -= 1

    def add(self, subscriber_id: int, wake: Wake | None) -> None:
        """Start a subscriber at the head; ``wake()`` is called when it has mail (None: pull)."""
        with self.lock:
            self._cursors[subscriber_id] = self._head
            self.subscriber_count = len(self._cursors)
            self._wakes[subscriber_id] = wake
            if wake is not None:
                self._idle[subscriber_id] = wake

    def remove(self, subscriber_id: int) -> list[Envelope]:
        """Stop a subscriber; return the entries it had not read yet."""
        with self._changed:
            cursor = self._cursors.pop(subscriber_id, None)
            self.subscriber_count = len(self._cursors)
            self._wakes.pop(subscriber_id, None)
            self._idle.pop(subscriber_id, None)
            self._changed.notify_all()
            replayed = [e for e, _ in self._replays.pop(subscriber_id, ())]
            return replayed if cursor is None else replayed + self._entries(cursor, self._head)

    def write_locked(self, envelopes: Sequence[Envelope]) -> tuple[list[tuple[int, Envelope]], list[Wake]]:
        """Append entries (`lock` held). Returns (lagged (subscriber, entry), wakes to call)."""
        lagged: list[tuple[int, Envelope]] = []
        capacity, slots = self.capacity, self._slots
        for start in range(0, len(envelopes), capacity):
            chunk = envelopes[start:start + capacity]
            floor = self._head + len(chunk) - capacity
            for subscriber_id, cursor in self._cursors.items():
                if cursor < floor:
                    lagged.extend((subscriber_id, e) for e in self._entries(cursor, floor))
                    self._cursors[subscriber_id] = floor
            for envelope in chunk:
                slots[self._head % capacity] = envelope
                self._head += 1
        wakes = list(self._idle.values())
        self._idle.clear()
        if self._pulling:
            self._changed.notify_all()
        return lagged, wakes

    def read(self, subscriber_id: int, limit: int) -> tuple[list[Envelope], list[int] | None] | None:
        """Take up to ``limit`` unread entries and their attempts (None: all first ones).

        Replayed entries come first, alone in their batch. An empty batch marks the
        subscriber idle; None: it was removed.
        """
        with self._changed:
            cursor = self._cursors.get(subscriber_id)
            if cursor is None:
                return None
            if self._replays.get(subscriber_id):
                return self._take_replays(subscriber_id, limit)
            end = min(self._head, cursor + limit)
            if end == cursor:
                wake = self._wakes.get(subscriber_id)
                if wake is not None:
                    self._idle[subscriber_id] = wake
                return [], None
            self._cursors[subscriber_id] = end
            if self._writers:
                self._changed.notify_all()
            return self._entries(cursor, end), None

    def read_one(self, subscriber_id: int, timeout: float | None) -> tuple[Envelope, int]:
        """Block for the next entry of a pull subscriber, and its attempt.

        Raises:
            TimeoutError: nothing arrived within ``timeout``.
            TopicClosedError: the topic closed (or the subscriber was removed).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                cursor = self._cursors.get(subscriber_id)
                if cursor is None or (self._closed and cursor == self._head):
                    raise TopicClosedError(self.topic)
                if self._replays.get(subscriber_id):
                    envelopes, attempts = self._take_replays(subscriber_id, 1)
                    return envelopes[0], attempts[0]
                if cursor < self._head:
                    self._cursors[subscriber_id] = cursor + 1
                    if self._writers:
                        self._changed.notify_all()
                    return self._entries(cursor, cursor + 1)[0], 1
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no message on topic {self.topic!r} within {timeout}s")
                self._pulling += 1
                try:
                    self._changed.wait(remaining)
                finally:
                    self._pulling -= 1

    def close(self) -> list[tuple[int, Envelope]]:
        """Mark closed; return every unread (subscriber, entry) and wake pull readers."""
        with self._changed:
            self._closed = True
            unread: list[tuple[int, Envelope]] = []
            for subscriber_id, cursor in self._cursors.items():
                unread.extend((subscriber_id, e) for e, _ in self._replays.pop(subscriber_id, ()))
                unread.extend((subscriber_id, e) for e in self._entries(cursor, self._head))
                self._cursors[subscriber_id] = self._head
            self._changed.notify_all()
            return unread

    def replay(
        self, subscriber_id: int, envelope: Envelope, attempt: int, reserve: Callable[[], None],
    ) -> bool:
        """Queue ``envelope`` for one subscriber only (a dead letter replayed to it).

        ``reserve()`` runs under `lock` first, so the subscriber cannot leave between
        the books counting the entry and the entry reaching it.

        Returns:
            False (nothing reserved) when the subscriber is gone or the ring closed.
        """
        with self._changed:
            if subscriber_id not in self._cursors or self._closed:
                return False
            reserve()
            self._replays.setdefault(subscriber_id, deque()).append((envelope, attempt))
            wake = self._idle.pop(subscriber_id, None)
            if self._pulling:
                self._changed.notify_all()
        if wake is not None:
            wake()
        return True

    def _take_replays(self, subscriber_id: int, limit: int) -> Replays:
        queue = self._replays[subscriber_id]
        taken = [queue.popleft() for _ in range(min(limit, len(queue)))]
        return [e for e, _ in taken], [a for _, a in taken]

    def _entries(self, start: int, end: int) -> list[Envelope]:
        capacity, slots = self.capacity, self._slots
        # Positions in [start, end) are always written, so no slot read here is None.
        return [slots[position % capacity] for position in range(start, end)]  # type: ignore[misc]
