"""The library code one message runs through in this process: ``python -m benchmarks.trace``.

``python -m benchmarks.trace [--json] [--list] topic|publisher``

- ``topic``: ``topic.publish`` -> a ``workers=2`` group's worker process -> the ack ->
  the publish's outcome resolved.
- ``publisher``: ``Publisher.publish`` -> its batch -> the topic -> the worker -> the
  publish's future confirmed and the message acked (``topic.join``).

A profile function (``sys.setprofile`` and ``threading.setprofile``, installed before the
bus starts, so every thread of the bus has it) records, while one message travels after
a warm-up, each distinct ``file:qualname`` pair of library code (files under ``actors/``
and ``runtime/``) called in this process, and the threads that called them. The worker
processes are not traced: the counts are what the parent pays per message. Counts are
of distinct functions, not calls: a function called once or a thousand times counts one.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import actors
import runtime

__all__ = ["PATHS", "Trace", "main", "render", "trace"]

PATHS = ("topic", "publisher")
_WARM_UP = 20
_TIMEOUT = 30.0


def _ack(delivery: Any) -> None:
    delivery.ack()


@dataclass(slots=True)
class Trace:
    """What one message ran through: ``functions`` maps ``file:qualname`` to the number of
    calls, ``threads`` names the threads that ran any of them."""

    path: str
    functions: dict[str, int] = field(default_factory=dict)
    threads: set[str] = field(default_factory=set)

    @property
    def files(self) -> set[str]:
        """The library files the functions live in."""
        return {name.partition(":")[0] for name in self.functions}

    def as_dict(self) -> dict[str, Any]:
        """The trace as plain data (the ``--json`` output)."""
        return {
            "path": self.path, "functions": len(self.functions), "files": len(self.files),
            "threads": len(self.threads), "thread_names": sorted(self.threads),
            "calls": dict(sorted(self.functions.items())),
        }


class _Recorder:
    """The profile function; records only while ``on`` is set (one store, read per call)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.on = False
        self._roots = tuple(str(root) + "/" for root in roots)
        self._base = len(str(roots[0].parent)) + 1
        self._lock = threading.Lock()
        self.functions: dict[str, int] = {}
        self.threads: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on:
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(self._roots):
            return
        name = f"{filename[self._base:]}:{frame.f_code.co_qualname}"
        with self._lock:
            self.functions[name] = self.functions.get(name, 0) + 1
            self.threads.add(threading.current_thread().name)


@contextmanager
def _profiled(recorder: _Recorder) -> Iterator[None]:
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def _package_roots() -> list[Path]:
    return [Path(str(package.__file__)).resolve().parent for package in (actors, runtime)]


def trace(path: str) -> Trace:
    """Trace one message along ``path`` (one of `PATHS`) after a warm-up.

    Raises:
        ValueError: ``path`` is not one of `PATHS`.
    """
    if path not in PATHS:
        raise ValueError(f"unknown path {path!r}; choose from {', '.join(PATHS)}")
    recorder = _Recorder(_package_roots())
    with _profiled(recorder), runtime.Bus() as bus:
        topic = bus.create_topic("trace")
        topic.subscribe(_ack, group="workers", workers=2)
        send = _topic_sender(topic) if path == "topic" else _publisher_sender(topic)
        for _ in range(_WARM_UP):
            send()
        recorder.on = True
        send()
        recorder.on = False
    return Trace(path, recorder.functions, recorder.threads)


def _topic_sender(topic: runtime.Topic[Any]) -> Callable[[], None]:
    def send() -> None:
        topic.publish(b"x").outcome.result(_TIMEOUT)
    return send


def _publisher_sender(topic: runtime.Topic[Any]) -> Callable[[], None]:
    publisher = topic.publisher()

    def send() -> None:
        publisher.publish(b"x").result(_TIMEOUT)
        if not topic.join(_TIMEOUT):
            raise RuntimeError("the traced message was not settled in time")
    return send


def render(traces: Sequence[Trace], *, listing: bool = False) -> str:
    """A table of each trace's counts; with ``listing``, every function first."""
    lines: list[str] = []
    if listing:
        for one in traces:
            lines.append(f"{one.path}:")
            lines += [f"  {calls:6d}  {name}" for name, calls in sorted(one.functions.items())]
            lines.append(f"  threads: {', '.join(sorted(one.threads))}")
    lines.append(f"{'path':<10} {'functions':>9} {'files':>6} {'threads':>7}")
    lines += [f"{one.path:<10} {len(one.functions):>9} {len(one.files):>6} {len(one.threads):>7}"
              for one in traces]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code (2: a usage error)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", metavar="PATH", default=list(PATHS),
                        help=f"what to trace: {', '.join(PATHS)} (default: both)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--list", action="store_true", help="list every function traced")
    args = parser.parse_args(argv)
    unknown = [path for path in args.paths if path not in PATHS]
    if unknown:
        parser.error(f"unknown path {unknown[0]!r}; choose from {', '.join(PATHS)}")
    traces = [trace(path) for path in args.paths]
    if args.json:
        print(json.dumps([one.as_dict() for one in traces], indent=2))
    else:
        print(render(traces, listing=args.list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
