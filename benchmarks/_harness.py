"""Scenarios, profiles and results: the shapes every benchmark shares.

A scenario measures one thing actorbus does next to the baseline a user would otherwise
write, in the same run, and returns `Comparison` values; the harness turns them into
`Result` rows whose ``ratio`` is oriented so that higher is better.

Adding a scenario:

1. Write ``measure(profile) -> Comparison | tuple[Comparison, ...]`` in the module of its
   family (``_thread_actors.py``, ``_process_actors.py``, ...). Start the candidate and the
   baseline side by side, then call `benchmarks._measure.interleave` so both run in
   alternating rounds and their medians are compared. Scale counts with
   `Profile.count`. Stop every thread and process you start (use ``with``).
2. Raise `Skip` (with the reason) when the scenario cannot run here (no Java, ...).
3. Describe it with a `Scenario` (name, unit, baseline label, target, orientation) in
   the family module's ``SCENARIOS`` tuple and add that tuple to ``_suite.SCENARIOS``.

The families and their modules:

- ``_thread_actors``: ``actor_tell`` / ``actor_ask`` vs bare pykka.
- ``_process_actors``: ``process_roundtrip`` / ``process_batched`` vs a raw Pipe.
- ``_cpu_scaling``: ``cpu_scaling``, a pool of every core vs a pool of one.
- ``_pipeline``: ``pipeline_inproc``, Publisher -> topic -> one acking thread member vs
  pykka ``tell`` (target 0.5); extra row vs a hand-written loop (the limit).
- ``_pipeline_pool``: ``pipeline_pool``, the same into a ``workers=2`` group vs fork
  ``ProcessPoolExecutor.map`` (target 1.0), ``multiprocessing.Pool``, our own
  ``ActorSystem.pool`` asked per 100 (the kernel ceiling), a batched fork
  ``multiprocessing.Queue`` (the limit); ``/max_pending`` and ``/ordered_fc`` against the
  plain path (0.8), ``/publish1`` (``topic.publish`` one at a time) vs ``submit`` (3.0).
- ``_tuned``: ``pipeline_tuned``, the plain ``pipeline_pool`` path and
  ``ProcessPoolExecutor.map`` in one fresh interpreter whose collector is set as a
  high-rate application would (frozen after start-up, a first threshold of 20,000;
  report only).
- ``_pinned``: ``pipeline_pinned``, the plain ``pipeline_pool`` path with every thread of
  the parent on one CPU (`actors.pin_threads`) vs ``ProcessPoolExecutor.map`` pinned alike,
  vs our path as the OS places its threads (``/free``), and the 16-key paths pinned vs the
  plain path pinned (``/ordered``, ``/ordered_fc``); a fresh interpreter, report only.
- ``_cpu_scaling`` also holds ``fanout_cpu``: a ~200 us handler, one-at-a-time publish to
  ``workers=2``, its speedup over serial vs the best stdlib pool's (target 0.9).
- ``_fanout``: ``broadcast_fanout``, 8 broadcast subscribers, cost per delivery.
- ``_publisher_batching``: ``batching``, default batching vs ``max_messages=1`` (target 10),
  into a ``workers=2`` group; ``batching/thread``, the same into one thread member.
- ``_latency``: ``latency`` (p50) and ``latency/p99`` with ``max_latency=0.001``, as
  ratios to 2 ms / 10 ms.
- ``_memory``: ``memory_flow_control``, peak RSS growth in a fresh interpreter for
  200,000 x 1 KiB through a slow subscriber under 16 MiB of flow control (at most 64 MiB).
- ``_redis_pipeline``: ``redis_pipeline``, Publisher -> Redis topic -> ``workers=2`` vs
  the raw redis-py ceiling (Lua XADD x100, two XREADGROUP + XACK processes; target 0.5).
- ``_redis_partitions``: ``redis_partitions``, 64 keys over a 2-partition topic whose two
  worker processes own one partition each vs one partition read in order by one worker
  (~200 us handler; target 1.5); ``/compete``, vs one partition and two competing workers.
- ``_redis_fanout``: ``redis_fanout_cpu``, ``fanout_cpu`` on a Redis topic's ``workers=2``
  group fed by a Publisher: its speedup over serial vs the best stdlib pool's (target 0.9);
  ``/publish1`` the same with ``topic.publish`` one at a time (report only).
- ``_spark``: ``spark_source`` / ``spark_sink``, rows/s on ``local[2]`` (floor 100,000),
  skipped with a reason without pyspark, Java or the bridge's measurement;
  ``spark_source_redis`` (vs ``spark_source``, 1.0; ``/ceiling`` 0.5) and
  ``spark_sink_redis`` (0.25) on a Redis topic, skipped without a Redis.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["PROFILES", "Comparison", "Profile", "Result", "Scenario", "Skip"]

logger = logging.getLogger(__name__)


class Skip(Exception):
    """Raised by a scenario that cannot run on this machine; the argument is the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """How hard to measure: interleaved rounds per side and a scale for message counts.

    Attributes:
        name: ``"full"``, ``"quick"`` or ``"smoke"`` (tiny sizes, for tests only).
        repeats: measured rounds per side (after one warm-up round each).
        scale: multiplies the full-size counts a scenario asks for.
    """

    name: str
    repeats: int
    scale: float

    def count(self, full: int, *, minimum: int = 10) -> int:
        """The count to use for something that takes ``full`` items at full size."""
        return max(minimum, math.ceil(full * self.scale))


PROFILES: Mapping[str, Profile] = MappingProxyType({
    "full": Profile(name="full", repeats=9, scale=1.0),
    "quick": Profile(name="quick", repeats=7, scale=0.25),
    "smoke": Profile(name="smoke", repeats=1, scale=0.01),
})


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """One measured value next to its baseline's value (same unit, same run).

    The main row of a scenario has ``suffix=""`` and takes label and target from the
    `Scenario`. Extra rows (another baseline, a practical limit) set ``suffix`` and
    their own ``baseline`` label and ``target``.
    """

    value: float
    baseline_value: float
    suffix: str = ""
    baseline: str | None = None
    target: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One row of the report; `to_json` gives exactly the documented keys."""

    name: str
    value: float | None
    unit: str
    baseline: str
    baseline_value: float | None
    ratio: float | None
    target: float | None
    skipped: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this row (``skipped``/``error`` only when set)."""
        row: dict[str, Any] = {
            "name": self.name, "value": self.value, "unit": self.unit,
            "baseline": self.baseline, "baseline_value": self.baseline_value,
            "ratio": self.ratio, "target": self.target,
        }
        if self.skipped is not None:
            row["skipped"] = self.skipped
        if self.error is not None:
            row["error"] = self.error
        return row


Measure = Callable[[Profile], "Comparison | tuple[Comparison, ...]"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A named benchmark: what it measures, against what, and the ratio aimed for.

    Attributes:
        name: the key for ``--only`` and the main row's name.
        unit: unit of ``value`` and ``baseline_value`` (e.g. ``"msg/s"``, ``"us"``).
        baseline: what the main row is compared with, in a few words.
        target: the ratio aimed for, or None (report only).
        higher_is_better: False for latencies and sizes: the ratio is then
            ``baseline_value / value``.
        measure: runs the scenario; see the module docstring.
    """

    name: str
    unit: str
    baseline: str
    target: float | None
    measure: Measure
    higher_is_better: bool = True

    def run(self, profile: Profile) -> tuple[Result, ...]:
        """Measure and return the rows; never raises (failures become rows with an error)."""
        try:
            outcome = self.measure(profile)
        except Skip as skip:
            return (self._empty(skipped=str(skip)),)
        except Exception as exc:
            logger.exception("benchmark %s failed", self.name)
            return (self._empty(error=f"{type(exc).__name__}: {exc}"),)
        comparisons = outcome if isinstance(outcome, tuple) else (outcome,)
        return tuple(self._row(comparison) for comparison in comparisons)

    def _row(self, comparison: Comparison) -> Result:
        main = not comparison.suffix
        value, base = comparison.value, comparison.baseline_value
        numerator, denominator = (value, base) if self.higher_is_better else (base, value)
        ratio = numerator / denominator if denominator > 0 else None
        return Result(
            name=self.name if main else f"{self.name}/{comparison.suffix}",
            value=value, unit=self.unit,
            baseline=self.baseline if main or comparison.baseline is None else comparison.baseline,
            baseline_value=base, ratio=ratio,
            target=self.target if main else comparison.target,
        )

    def _empty(self, *, skipped: str | None = None, error: str | None = None) -> Result:
        return Result(name=self.name, value=None, unit=self.unit, baseline=self.baseline,
                      baseline_value=None, ratio=None, target=self.target,
                      skipped=skipped, error=error)
