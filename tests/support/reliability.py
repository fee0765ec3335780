"""Shared pieces of the reliability suite (issue 7): figures, worker pids, restart waits.

Not a test module of its own: the `figures` fixture is imported by the
``test_reliability_*`` modules. Each reliability test records its figures (messages,
faults injected, lost, duplicates, recovery time) as one JSON line in
``<pytest basetemp>/reliability-results.jsonl`` (or ``$ACTORBUS_RELIABILITY_RESULTS``)
and prints them with a ``RELIABILITY`` prefix (visible with ``-s``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from actors import ActorSystem, Event
from runtime import Bus

RESULTS_ENV = "ACTORBUS_RELIABILITY_RESULTS"

Record = Callable[..., None]


@pytest.fixture
def figures(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Record]:
    """``figures(**values)`` records this test's figures (merged; written at teardown)."""
    values: dict[str, Any] = {}

    def record(**more: Any) -> None:
        values.update(more)

    yield record

    if not values:
        return
    line = json.dumps({"test": request.node.name, **values}, sort_keys=True, default=str)
    target = os.environ.get(RESULTS_ENV) or str(
        tmp_path_factory.getbasetemp() / "reliability-results.jsonl")
    with open(target, "a", encoding="utf-8") as out:
        out.write(line + "\n")
    print(f"\nRELIABILITY {line}")


def worker_pids(bus: Bus) -> dict[str, int]:
    """Live worker processes of ``bus``'s system, by actor name (pool members only)."""
    return {
        name: status.pid for name, status in bus.system.status().items()
        if status.kind == "process" and status.alive and status.pid
        and psutil.pid_exists(status.pid)
    }


class RestartWatch:
    """Records the system's lifecycle events; waits for a given actor to be restarted."""

    def __init__(self, system: ActorSystem) -> None:
        self.events: list[Event] = []
        self._changed = threading.Condition()
        self.unsubscribe = system.events.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def restarted_after(self, name: str, since: float, timeout: float) -> float | None:
        """The wall time of ``name``'s first ``restarted`` event at or after ``since``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self.events:
                    if event.kind == "restarted" and event.name == name and event.at >= since:
                        return float(event.at)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def wait_for(self, kind: str, timeout: float, name: str | None = None) -> Event | None:
        """The first event of ``kind`` (and ``name``, when given), waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self.events:
                    if event.kind == kind and (name is None or event.name == name):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def wait_count(self, kind: str, name: str, count: int, timeout: float) -> bool:
        """Wait until ``name`` had ``count`` events of ``kind``, or any ``escalated`` event."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if any(e.kind == "escalated" for e in self.events):
                    return True
                if sum(1 for e in self.events if e.kind == kind and e.name == name) >= count:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)

    def count(self, kind: str, name: str | None = None) -> int:
        with self._changed:
            return sum(1 for e in self.events if e.kind == kind and (name is None or e.name == name))


def process_usage() -> tuple[int, int]:
    """(open file descriptors, threads) of this process."""
    me = psutil.Process()
    return me.num_fds(), threading.active_count()


def append_line(directory: str, text: str) -> None:
    """Append ``text`` to the file named after this process (survives a SIGKILL right after)."""
    fd = os.open(os.path.join(directory, str(os.getpid())), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, text.encode() + b"\n")
    finally:
        os.close(fd)


def read_lines(directory: Path) -> list[str]:
    """Every line appended by `append_line` in ``directory``, all processes together."""
    return [line for path in directory.iterdir() if path.name.isdigit()
            for line in path.read_text().splitlines() if line]


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float = 0.01) -> bool:
    """Re-check ``predicate`` every ``poll`` s until it holds; False if ``timeout`` passed.

    For states with no event to wait on (a publisher blocked inside flow control): the
    test goes on when the state is observed, never after a fixed delay.
    """
    deadline = time.monotonic() + timeout
    tick = threading.Event()  # never set: its wait() is the bounded poll interval
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        tick.wait(poll)
    return True
