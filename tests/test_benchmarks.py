"""The benchmark suite runs end to end (tiny sizes) and reports in the documented shape."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import benchmarks
from benchmarks import _spark, threads

KERNEL_SCENARIOS = ("actor_tell", "actor_ask", "process_roundtrip", "process_batched",
                    "cpu_scaling")
RUNTIME_SCENARIOS = ("pipeline_inproc", "pipeline_pool", "pipeline_tuned", "pipeline_pinned",
                     "fanout_cpu", "broadcast_fanout", "batching", "latency",
                     "memory_flow_control")
REDIS_SCENARIOS = ("redis_pipeline", "redis_partitions", "redis_fanout_cpu")
SPARK_SCENARIOS = ("spark_source", "spark_sink", "spark_source_redis", "spark_sink_redis")
JSON_KEYS = {"name", "value", "unit", "baseline", "baseline_value", "ratio", "target"}
NOT_YET = "runtime.spark measurement not available yet"


def test_every_scenario_of_the_suite_is_covered_here() -> None:
    names = [scenario.name for scenario in benchmarks.SCENARIOS]

    assert names == [*KERNEL_SCENARIOS, *RUNTIME_SCENARIOS, *REDIS_SCENARIOS, *SPARK_SCENARIOS]


@pytest.mark.timeout(60)
def test_smoke_run_gives_every_scenario_but_spark_a_number(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"
    scenarios = (*KERNEL_SCENARIOS, *RUNTIME_SCENARIOS)

    code = benchmarks.main(["--smoke", "--only", *scenarios, "--json", str(path)])

    assert code == 0
    rows = json.loads(path.read_text(encoding="utf-8"))["results"]
    main_rows = [row for row in rows if "/" not in row["name"]]
    assert [row["name"] for row in main_rows] == list(scenarios)
    assert {row["name"] for row in rows} >= {
        "pipeline_inproc/limit", "pipeline_pool/pool", "pipeline_pool/kernel", "pipeline_pool/queue",
        "pipeline_pool/max_pending", "pipeline_pool/ordered", "pipeline_pool/ordered_fc",
        "pipeline_pool/publish1", "pipeline_pool/kept", "pipeline_pool/futures", "pipeline_pool/bulk",
        "pipeline_pinned/free", "pipeline_pinned/ordered",
        "pipeline_pinned/ordered_fc", "latency/p99", "batching/thread"}
    for row in rows:
        assert set(row) == JSON_KEYS, row
        assert isinstance(row["value"], float) and row["value"] > 0, row
        assert isinstance(row["baseline_value"], float) and row["baseline_value"] > 0, row
        assert row["ratio"] == pytest.approx(_oriented_ratio(row)), row
    printed = capsys.readouterr().out
    assert all(name in printed for name in scenarios)


def test_spark_rows_are_skipped_with_a_reason_when_the_measurement_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.json"
    monkeypatch.setattr(_spark, "missing_requirement", lambda: NOT_YET)

    code = benchmarks.main(["--smoke", "--only", *SPARK_SCENARIOS, "--json", str(path)])

    assert code == 0
    rows = json.loads(path.read_text(encoding="utf-8"))["results"]
    assert [(row["name"], row["value"], row["ratio"], row["skipped"]) for row in rows] == [
        (name, None, None, NOT_YET) for name in SPARK_SCENARIOS]


@pytest.mark.timeout(120)
def test_redis_pipeline_measures_against_the_raw_ceiling_or_says_why_not(tmp_path: Path) -> None:
    path = tmp_path / "b.json"

    code = benchmarks.main(["--smoke", "--only", "redis_pipeline", "--json", str(path)])

    assert code == 0
    rows = json.loads(path.read_text(encoding="utf-8"))["results"]
    assert rows[0]["name"] == "redis_pipeline"
    if rows[0].get("skipped"):
        assert "redis" in rows[0]["skipped"].lower()
        return
    assert {row["name"] for row in rows} <= {"redis_pipeline", "redis_pipeline/dramatiq"}
    for row in rows:
        assert row["value"] > 0 and row["baseline_value"] > 0, row


@pytest.mark.timeout(120)
def test_redis_fanout_cpu_measures_a_speedup_against_the_stdlib_pools_or_says_why_not(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"

    code = benchmarks.main(["--smoke", "--only", "redis_fanout_cpu", "--json", str(path)])

    assert code == 0
    rows = json.loads(path.read_text(encoding="utf-8"))["results"]
    if rows[0].get("skipped"):
        assert rows[0]["name"] == "redis_fanout_cpu"
        assert "redis" in rows[0]["skipped"].lower()
        return
    assert [(row["name"], row["unit"], row["target"]) for row in rows] == [
        ("redis_fanout_cpu", "x", 0.9), ("redis_fanout_cpu/publish1", "x", None),
        ("redis_fanout_cpu/raw", "x", None)]
    for row in rows:
        assert row["value"] > 0 and row["baseline_value"] > 0, row
        assert row["ratio"] == pytest.approx(row["value"] / row["baseline_value"])


def test_unknown_scenario_is_refused_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "b.json"

    code = benchmarks.main(["--smoke", "--only", "no_such_scenario", "--json", str(path)])

    assert code == 2
    assert not path.exists()


@pytest.mark.timeout(60)
def test_thread_profile_gives_each_path_its_threads_cpu_per_message() -> None:
    profile = threads.measure(["plain", "ordered_fc"], messages=2_000, rounds=1)

    assert list(profile) == ["plain", "ordered_fc"]
    for per in profile.values():
        assert {"MainThread", "PublisherActor", "TopicActor", "GroupActor"} <= set(per)
        assert all(per[name] > 0 for name in ("MainThread", "PublisherActor", threads.WORKERS,
                                              threads.WALL))
        shared = [value for name, value in per.items() if name not in threads.TOTALS]
        assert per[threads.PARENT] == pytest.approx(sum(shared))
    table = threads.render(profile).splitlines()
    assert table[0].split()[-2:] == ["plain", "ordered_fc"]
    assert [line.split()[0] for line in table[-3:]] == list(threads.TOTALS)


def test_thread_cpu_counts_a_thread_started_since_whole_and_leaves_out_one_that_ended() -> None:
    # Two threads of one name ("Spinner"): the one that ended must not take its CPU off
    # the one that started since.
    first, second = _Spinner("Spinner-1"), _Spinner("Spinner-2")
    first.start()
    assert first.spun.wait(10)
    before = threads.thread_cpu()
    first.stop()
    second.start()
    try:
        assert second.spun.wait(10)
        spent = threads.spent_since(before)
    finally:
        second.stop()

    assert spent["Spinner"] >= second.cpu > 1_000_000  # nanoseconds
    assert min(spent.values()) >= 0


class _Spinner(threading.Thread):
    """Spins ~2M additions, records its CPU for them, then waits until stopped."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.spun, self._release, self.cpu = threading.Event(), threading.Event(), 0

    def run(self) -> None:
        start = time.thread_time_ns()
        sum(range(2_000_000))
        self.cpu = time.thread_time_ns() - start
        self.spun.set()
        self._release.wait(10)

    def stop(self) -> None:
        self._release.set()
        self.join(10)


def test_thread_profile_refuses_an_unknown_path(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        threads.main(["plain", "no_such_path"])

    assert exited.value.code == 2
    assert "unknown paths: no_such_path" in capsys.readouterr().err


def _oriented_ratio(row: dict[str, Any]) -> float:
    higher_is_better = {s.name: s.higher_is_better for s in benchmarks.SCENARIOS}
    value, base = float(row["value"]), float(row["baseline_value"])
    return value / base if higher_is_better[row["name"].split("/")[0]] else base / value
