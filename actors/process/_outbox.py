"""What a process actor's process reports to its parent, sent in few frames, never late."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from actors.process import _wire as wire

__all__ = ["FLUSH_EVERY", "HOLD", "LATEST", "Outbox"]

# The three trade a reply's latency for fewer, larger frames; re-measure a change with
# ``python -m benchmarks --only process_roundtrip process_batched latency``.
# Reports that make a frame at once, however busy the serving loop is.
FLUSH_EVERY = 256
# A message that took this long has its reply sent at once, with what waits before it;
# a reply waits for company behind short messages at most about this long.
HOLD = 0.0002
# The longest a report waits while a handler runs, about (the flusher thread's bound,
# plus up to the interpreter's switch interval for it to run).
LATEST = 0.02

Report = tuple[Any, ...]


class Outbox:
    """Reports (replies, failures, tells done) on their way to the parent.

    The serving loop sends what waits when its inbox is empty, when the message it just
    handled took `HOLD` or longer, or when replies wait (`FLUSH_EVERY` of them, or the
    oldest for `HOLD`): a flood of small messages costs a frame per burst, not per
    message, a long one's reply leaves as soon as it is done, and no reply waits long
    behind short messages (a pool routing to the least busy member counts it as busy
    until its replies arrive). Held until the inbox was empty, the answer to a
    worker's hand-over waited for the next hand-over to finish: the parent learnt a
    whole hand-over late that the worker had room, and the first hand-over's ack
    deadline ran on meanwhile (two workers on rounds of 2,000 200-µs messages were busy
    85-90% of the time, now 90.5-92.5%).

    A flusher thread covers what the loop cannot: reports that wait while the next
    handler runs long. The loop arms it only when it starts a message with reports
    waiting (never between the asks of a round trip, so no wake-up of its own there).

    Args:
        send: writes one frame of reports (thread-safe).
        clock: ``time.monotonic`` (tests pass their own).
    """

    def __init__(self, send: Callable[[list[Report]], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._send = send
        self._clock = clock
        self._items: list[Report] = []
        self.waiting = False  # whether anything waits to be sent (a report, a tell done)
        self.armed = False  # whether the flusher watches what waits
        self._closed = False
        self._since = 0.0  # when the oldest unsent report came (or a tell was done)
        self._last_tell = 0
        self._reported_tell = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the flusher's
        self._sending = threading.Lock()  # frames leave in the order of their reports

    def add(self, report: Report) -> None:
        """Queue ``report`` for the next frame."""
        with self._lock:
            self._note()
            self._items.append(report)

    def told(self, seq: int) -> None:
        """Tells up to ``seq`` are done (the next frame says so)."""
        with self._lock:
            self._note()
            self._last_tell = seq

    def _note(self) -> None:
        if not self.waiting:
            self.waiting = True
            self._since = self._clock()

    def due(self, started: float) -> bool:
        """Whether what waits should leave now, though the serving loop has more mail:
        the message begun at ``started`` (on ``clock``) took `HOLD` or longer, or
        replies wait: `FLUSH_EVERY` of them, or since `HOLD` ago (tells done alone wait
        for an empty inbox: a flood of tells is not a frame each `HOLD`)."""
        now, items = self._clock(), self._items
        if items and (len(items) >= FLUSH_EVERY or now - self._since >= HOLD):
            return True
        return now - started >= HOLD

    def arm(self) -> None:
        """A message starts while reports wait: have the flusher send them if it runs
        long."""
        with self._lock:
            if not self.armed:
                self.armed = True
                self._wake.notify()

    def flush(self) -> None:
        """Send every waiting report, in one frame."""
        with self._sending:
            with self._lock:
                items, self._items = self._items, []
                if self._last_tell != self._reported_tell:
                    self._reported_tell = self._last_tell
                    items.append((wire.DONE, self._last_tell))
                self.waiting = False
            if items:
                self._send(items)

    def close(self) -> None:
        """End `run_flusher` (a process actor's process never does: it exits)."""
        with self._lock:
            self._closed = True
            self._wake.notify()

    def run_flusher(self) -> None:
        """The flusher thread: once armed, send what waited `LATEST`; returns once closed."""
        wake = self._wake
        while True:
            with self._lock:
                while not self.armed and not self._closed:
                    wake.wait()
                if self._closed:
                    return
                if not self.waiting:
                    self.armed = False
                    continue
                left = self._since + LATEST - self._clock()
                if left > 0:
                    wake.wait(left)
                    continue
                self.armed = False
            self.flush()
