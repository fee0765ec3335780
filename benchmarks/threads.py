"""Where the parent's CPU goes: CPU per message of each thread on ``pipeline_pool``'s paths.

``python -m benchmarks.threads [--messages N] [--rounds R] [PATH ...]``

The paths are ``pipeline_pool``'s: ``plain`` (a Publisher, no limits), ``ordered``
(``message_ordering``, 16 keys) and ``ordered_fc`` (the same under
``FlowControl(max_outstanding_messages=1000)``), into one ``workers=2`` group, rounds
alternated in one bus. Each row is a thread of this process, named without its
numbers (``PublisherActor-7`` is ``PublisherActor``), in microseconds of CPU per message;
``workers`` is the two worker processes together. The parent's threads share one GIL, so
on the paths here their sum, not any one thread, bounds the rate: a row against ``plain``
is what that path costs the parent on top of it.

Thread CPU is read from ``/proc/<pid>/task/*/schedstat`` (nanoseconds) where there is
one, else from psutil (clock ticks).
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from ._measure import payloads
from ._pipeline import run_pipeline
from ._pipeline_pool import Ours, ours, run_ordered

__all__ = [
    "PARENT", "PATHS", "TOTALS", "WALL", "WORKERS", "Profile", "main", "measure", "render", "spent_since",
    "thread_cpu",
]

PATHS = ("plain", "ordered", "ordered_fc")
_NUMBERS = re.compile(r"-\d+")
WALL, PARENT, WORKERS = "wall", "parent", "workers"
TOTALS = (PARENT, WORKERS, WALL)


# Per path, microseconds per message: one entry per thread name, plus ``wall``,
# ``workers`` and ``parent`` (the sum of this process's threads).
Profile = dict[str, Counter[str]]


def _runners(sides: Ours) -> dict[str, Callable[[list[bytes]], None]]:
    return {
        "plain": lambda messages: run_pipeline(sides.topic, sides.publisher, messages),
        "ordered": lambda messages: run_ordered(sides.topic, sides.ordered, messages),
        "ordered_fc": lambda messages: run_ordered(sides.topic, sides.ordered_fc, messages),
    }


def thread_cpu() -> dict[tuple[str, int], int]:
    """Nanoseconds of CPU so far of each live thread of this process, keyed by its name
    without numbers and its id, and of each thread of its children, named ``workers``."""
    names = {thread.native_id: _NUMBERS.sub("", thread.name) for thread in threading.enumerate()}
    this = psutil.Process()
    spent = {(names.get(tid, "other"), tid): nanoseconds for tid, nanoseconds in _tasks(this)}
    for child in this.children(recursive=True):
        spent.update(((WORKERS, tid), nanoseconds) for tid, nanoseconds in _tasks(child))
    return spent


def spent_since(before: dict[tuple[str, int], int]) -> Counter[str]:
    """CPU per name since ``before``, thread by thread: a thread started since counts
    whole; one that ended since is left out (its last CPU can no longer be read)."""
    spent: Counter[str] = Counter()
    for (name, tid), nanoseconds in thread_cpu().items():
        spent[name] += nanoseconds - before.get((name, tid), 0)
    return spent


def _tasks(process: psutil.Process) -> list[tuple[int, int]]:
    """Each thread of ``process`` and its CPU so far in nanoseconds; none once it ended."""
    tasks = Path(f"/proc/{process.pid}/task")
    if not tasks.is_dir():
        try:
            return [(t.id, round((t.user_time + t.system_time) * 1e9)) for t in process.threads()]
        except psutil.Error:
            return []
    found = []
    for task in tasks.iterdir():
        try:
            found.append((int(task.name), int((task / "schedstat").read_text().split()[0])))
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    return found


def measure(paths: Sequence[str] = PATHS, messages: int = 100_000, rounds: int = 5) -> Profile:
    """Run ``rounds`` rounds of ``messages`` on each path, alternated after one warm-up
    round each, and return each path's CPU per message by thread.

    Raises:
        ValueError: a path is not one of `PATHS` (before anything starts).
    """
    if unknown := [path for path in paths if path not in PATHS]:
        raise ValueError(f"unknown paths: {', '.join(unknown)} (known: {', '.join(PATHS)})")
    batch, totals = payloads(messages), {path: Counter[str]() for path in paths}
    with ours() as sides:
        runners = _runners(sides)
        for path in paths:
            runners[path](batch)
        for _ in range(rounds):
            for path in paths:
                before, start = thread_cpu(), time.perf_counter()
                runners[path](batch)
                totals[path][WALL] += round((time.perf_counter() - start) * 1e9)
                totals[path].update(spent_since(before))
    return {path: _per_message(spent, messages * rounds) for path, spent in totals.items()}


def _per_message(spent: Counter[str], count: int) -> Counter[str]:
    per = Counter({name: nanoseconds / count / 1e3 for name, nanoseconds in spent.items()})
    per[PARENT] = sum(value for name, value in per.items() if name not in TOTALS)
    return per


def render(profile: Profile, floor: float = 0.02) -> str:
    """``profile`` as a text table: the threads that spent ``floor`` µs per message or more
    on some path, then the parent's sum, the workers and the wall time."""
    paths = list(profile)
    threads = sorted({name for per in profile.values() for name, value in per.items()
                      if value >= floor and name not in TOTALS})
    header = f"{'µs per message':24s}" + "".join(f"{path:>12s}" for path in paths)
    rows = [f"{name:24s}" + "".join(f"{profile[path][name]:12.2f}" for path in paths)
            for name in (*threads, *TOTALS)]
    return "\n".join([header, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.threads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=list(PATHS), metavar="PATH",
                        help=f"among {', '.join(PATHS)} (default: all)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        profile = measure(args.paths, args.messages, args.rounds)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{os.cpu_count()} CPUs; {args.rounds} rounds of {args.messages:,} messages a path")
    print(render(profile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
