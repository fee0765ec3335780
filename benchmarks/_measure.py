"""Interleaved measurement: both sides of a comparison run in alternating rounds.

The host is noisy (shared vCPUs), so a comparison never runs all of one side and then
all of the other: round ``r`` runs every side once, the order flipping each round, and
each side's median over the rounds is what gets reported.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping

__all__ = ["Round", "interleave", "payloads", "per_second", "seconds_per"]

Round = Callable[[], float]
"""One measured round of one side: runs the work and returns its figure (a rate or a time)."""


def interleave(sides: Mapping[str, Round], *, repeats: int, warmup: int = 1) -> dict[str, float]:
    """Run every side ``warmup + repeats`` times, alternating, and return each side's median.

    Warm-up rounds are run (same alternation) and discarded. A full collection runs
    before every round so that one side does not pay for the other's garbage; during
    the round the collector stays on, as it would for a user.

    Args:
        sides: side name -> a round of that side.
        repeats: measured rounds per side (at least 1).
        warmup: discarded rounds per side before those.

    Returns:
        side name -> median of its measured rounds.
    """
    figures: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_index in range(warmup + max(1, repeats)):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            figure = _run_round(sides[name])
            if round_index >= warmup:
                figures[name].append(figure)
    return {name: statistics.median(values) for name, values in figures.items()}


def payloads(count: int, size: int = 100) -> list[bytes]:
    """``count`` distinct messages of ``size`` bytes (at least 12), built before timing.

    Every message is its own object with its own content: pickle sends a list holding
    one object many times as that object once plus back-references, which made every
    transport look several times faster than it is.
    """
    fill = b"x" * max(0, size - 12)
    return [b"%012d" % number + fill for number in range(count)]


def _run_round(run: Round) -> float:
    gc.collect()
    return run()


def per_second(count: int, work: Callable[[], None]) -> float:
    """Run ``work`` (which handles ``count`` items) once and return items per second."""
    start = time.perf_counter()
    work()
    return count / (time.perf_counter() - start)


def seconds_per(count: int, work: Callable[[], None]) -> float:
    """Run ``work`` (which does ``count`` operations) once and return seconds per operation."""
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) / count
