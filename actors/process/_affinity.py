"""Keeping this process's threads on one CPU while its process actors use every CPU.

A process's Python threads run one at a time (the GIL). Left to the OS they are spread
over every CPU, and the GIL passes between threads on different CPUs (a wake-up across
CPUs, the threads' shared data moved between caches). Keeping every thread of the
parent on one CPU trades that hand-over for the risk of sharing that CPU with something
busy; ``python -m benchmarks --only pipeline_pinned`` measures the trade on a given
machine. Nothing pins by default: a pinned process cannot be moved off a CPU that
something else keeps busy, so it is the operator's choice (`pin_threads`).

Pinning with ``taskset`` or ``os.sched_setaffinity`` alone would also pin every process
actor started afterwards (a child inherits its parent's CPUs), and a pool of workers
would share that one CPU. `pin_threads` records the CPUs the process had, and process
actors started from then on are given those back (`apply_process_cpus`, in the child).
"""

from __future__ import annotations

import os
import threading

__all__ = ["apply_process_cpus", "pin_threads", "process_cpus", "unpin_threads"]

_lock = threading.Lock()
_process_cpus: frozenset[int] | None = None  # the CPUs before `pin_threads`, while pinned


def pin_threads(cpu: int | None = None) -> int:
    """Keep every thread of this process on ``cpu``; process actors started from now on
    run on the CPUs the process had before. Threads started later by a pinned thread
    inherit its CPU. Returns the CPU.

    Args:
        cpu: one of the CPUs this process may use (default: the highest numbered).

    Raises:
        TypeError: ``cpu`` is not an int.
        ValueError: ``cpu`` is not one this process may use.
        NotImplementedError: the platform has no CPU affinity (only Linux has).
    """
    global _process_cpus
    if cpu is not None and (not isinstance(cpu, int) or isinstance(cpu, bool)):
        raise TypeError(f"cpu must be an int, not {type(cpu).__name__}")
    if not hasattr(os, "sched_setaffinity"):
        raise NotImplementedError("pin_threads needs os.sched_setaffinity (Linux)")
    with _lock:
        allowed = _process_cpus or frozenset(os.sched_getaffinity(0))
        chosen = max(allowed) if cpu is None else cpu
        if chosen not in allowed:
            raise ValueError(f"cpu {chosen!r} is not one this process may use: {sorted(allowed)}")
        _process_cpus = allowed
        _set_every_thread({chosen})
    return chosen


def unpin_threads() -> None:
    """Give every thread of this process the CPUs it had before `pin_threads` (no-op
    when not pinned)."""
    global _process_cpus
    with _lock:
        if _process_cpus is None:
            return
        _set_every_thread(_process_cpus)
        _process_cpus = None


def process_cpus() -> frozenset[int] | None:
    """The CPUs a process actor started now is given (None: not pinned, it inherits)."""
    return _process_cpus


def apply_process_cpus(cpus: frozenset[int] | None) -> None:
    """In a process actor's process, before any thread starts: run on ``cpus`` (only
    `pin_threads` sets them, where affinity exists)."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def _set_every_thread(cpus: set[int] | frozenset[int]) -> None:
    """Set the CPUs of each thread of this process, again for threads that started
    meanwhile (a thread takes its creator's CPUs), until a pass finds no new one."""
    done: set[int] = set()
    while True:
        tasks = {int(task) for task in os.listdir("/proc/self/task")} - done
        if not tasks:
            return
        for task in tasks:
            try:
                os.sched_setaffinity(task, cpus)
            except ProcessLookupError:  # it ended meanwhile
                pass
        done |= tasks
