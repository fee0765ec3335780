"""Rows per second through the Spark bridge on ``local[2]`` (``spark_source``, ``spark_sink``).

``benchmarks._spark_throughput.measure_spark_throughput`` times, with distinct 100-byte
payloads, the source alone (topic -> source -> ``noop``), the sink alone (a cached
DataFrame -> sink -> topic) and the pipeline (topic -> source -> sink -> topic), each
from the call that starts Spark's work to its end, query start-up included; and the same
three between in-memory Python data sources (``benchmarks._ceilings``), the ceiling
of a Python data source on the machine. It runs once per suite run in a fresh
interpreter with a timeout (Spark's JVM and its Python workers then end with it); every
row and its ceiling read from that one run: medians of three repetitions, each of ours
followed by the ceilings (a 2-vCPU host varies by 30% from one query to the next). A
million rows at full size: a streaming
query's start-up is a fixed cost that a short run would mostly measure. Each row's ratio
is actorbus rows/s over its ceiling's: targets 0.5 (source), 0.25 (sink) and 0.5
(``spark_source/pipeline``).

On a Redis (see `benchmarks._spark_throughput`), ``spark_source_redis`` (a Redis topic of
2 partitions -> ``option("redis", url)`` source -> ``noop``) is compared with
``spark_source`` (the broker's) in the same run, target 1.0, and with the in-memory
ceiling source, target 0.5 (``/ceiling``), and, report-only (``/raw``), with the same
topic read by redis-py alone: each task XREADGROUPs its stream and XACKs every read at
once, with no lease log, fence, outcomes or replay (what Redis itself gives on the
machine); ``spark_sink_redis`` (the cached frame -> Redis sink) with the discarding
Arrow writer, target 0.25.

Skipped, with the reason, when pyspark or Java is missing or the measurement does not
exist yet -- never a made-up figure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

from ._child import ChildFailed, run_child
from ._harness import Comparison, Profile, Scenario, Skip

__all__ = ["SCENARIOS", "SparkRun"]

SOURCE_TARGET, SINK_TARGET, PIPELINE_TARGET = 0.5, 0.25, 0.5
REDIS_VS_BROKER_TARGET = 1.0
_MEASUREMENT = "benchmarks._spark_throughput"
_NOT_YET = "runtime.spark measurement not available yet"
# Generous: the host may be shared; a timeout loses the whole measurement.
_TIMEOUTS = {"full": 600.0, "quick": 300.0, "smoke": 150.0}


def missing_requirement() -> str | None:
    """Why the Spark scenarios cannot run here, or None when they can (imports nothing)."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'actorbus[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "Java is not installed (Spark needs a JVM)"
    source = Path(__file__).with_name("_spark_throughput.py")
    if "def measure_spark_throughput(" not in _read(source):
        return _NOT_YET
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _measure_in_child(rows: int, timeout: float) -> dict[str, Any]:
    """Run the measurement in a new interpreter (own session: the JVM it starts is killed
    with it on timeout).

    Raises:
        Skip: the measurement cannot be imported.
        RuntimeError: it failed, or did not finish within ``timeout`` seconds.
    """
    code = (f"import json; from {_MEASUREMENT} import measure_spark_throughput as m; "
            f"print('RESULT ' + json.dumps(m({rows}, master='local[2]')))")
    try:
        figures: dict[str, Any] = run_child(code, timeout, "the Spark measurement")
    except ChildFailed as failed:
        if "ImportError" in failed.stderr and "measure_spark_throughput" in failed.stderr:
            raise Skip(_NOT_YET) from None
        raise
    return figures


class SparkRun:
    """One Spark measurement shared by both rows: taken at most once per profile."""

    def __init__(self) -> None:
        self._outcomes: dict[str, dict[str, Any] | Exception] = {}

    def figures(self, profile: Profile) -> dict[str, Any]:
        """The measurement's figures for ``profile`` (runs it the first time).

        Raises:
            Skip: pyspark, Java or the measurement is missing.
            RuntimeError: the measurement failed or timed out (also for the second row).
        """
        reason = missing_requirement()
        if reason is not None:
            raise Skip(reason)
        if profile.name not in self._outcomes:
            rows = profile.count(1_000_000, minimum=1_000)
            try:
                self._outcomes[profile.name] = _measure_in_child(rows, _TIMEOUTS[profile.name])
            except (Skip, RuntimeError) as exc:
                self._outcomes[profile.name] = exc
        outcome = self._outcomes[profile.name]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def source(self, profile: Profile) -> tuple[Comparison, ...]:
        """Rows per second read by the Spark source next to its ceiling, and the pipeline's."""
        pipeline = self._row(profile, "")
        return (
            self._row(profile, "source_"),
            Comparison(suffix="pipeline", baseline=_PIPELINE_LABEL, target=PIPELINE_TARGET,
                       value=pipeline.value, baseline_value=pipeline.baseline_value),
        )

    def sink(self, profile: Profile) -> Comparison:
        """Rows per second written by the Spark sink next to its ceiling."""
        return self._row(profile, "sink_")

    def redis_source(self, profile: Profile) -> tuple[Comparison, ...]:
        """The Redis source next to the broker's source, the ceiling source and the raw
        redis-py source."""
        redis, broker = self._row(profile, "redis_source_"), self._row(profile, "source_")
        raw = self._row(profile, "raw_redis_source_")
        return (
            Comparison(value=redis.value, baseline_value=broker.value),
            Comparison(suffix="ceiling", baseline=_CEILING_SOURCE_LABEL, target=SOURCE_TARGET,
                       value=redis.value, baseline_value=redis.baseline_value),
            Comparison(suffix="raw", baseline=_RAW_SOURCE_LABEL, target=None,
                       value=redis.value, baseline_value=raw.value),
        )

    def redis_sink(self, profile: Profile) -> Comparison:
        """The Redis sink next to the discarding Arrow writer."""
        return self._row(profile, "redis_sink_")

    def _row(self, profile: Profile, prefix: str) -> Comparison:
        """The rate of the run whose figures start with ``prefix`` ("" for the pipeline).

        Raises:
            RuntimeError: that run lost rows (or the measurement has no such figures).
        """
        figures = self.figures(profile)
        if "redis_" in prefix and "redis_missing" in figures:
            raise Skip(str(figures["redis_missing"]))
        rows, moved = figures.get(f"{prefix}rows"), figures.get(f"{prefix}rows_out")
        if rows is None or moved != rows:
            raise RuntimeError(f"Spark ({prefix or 'pipeline'}) moved {moved} of {rows} rows")
        # the Redis runs share the broker runs' ceilings
        ceiling = prefix.removeprefix("raw_").removeprefix("redis_")
        return Comparison(value=float(figures[f"{prefix}rows_per_second"]),
                          baseline_value=float(figures[f"ceiling_{ceiling}rows_per_second"]))


_RUN = SparkRun()
_PIPELINE_LABEL = "in-memory source -> discarding stream writer; local[2]"
_CEILING_SOURCE_LABEL = "in-memory streaming source -> noop; local[2], start-up incl."
_RAW_SOURCE_LABEL = "the same topic read by redis-py alone (XREADGROUP, XACK), same batches"

SCENARIOS = (
    Scenario(name="spark_source", unit="rows/s", target=SOURCE_TARGET, measure=_RUN.source,
             baseline="in-memory streaming source -> noop; local[2], start-up incl."),
    Scenario(name="spark_sink", unit="rows/s", target=SINK_TARGET, measure=_RUN.sink,
             baseline="DataFrame -> discarding Arrow writer; local[2], start-up incl."),
    Scenario(name="spark_source_redis", unit="rows/s", target=REDIS_VS_BROKER_TARGET,
             measure=_RUN.redis_source,
             baseline="spark_source: broker topic -> source -> noop, same run"),
    Scenario(name="spark_sink_redis", unit="rows/s", target=SINK_TARGET, measure=_RUN.redis_sink,
             baseline="DataFrame -> discarding Arrow writer; local[2], start-up incl."),
)
