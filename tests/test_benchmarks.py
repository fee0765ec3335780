"""The benchmark suite runs end to end (tiny sizes) and reports in the documented shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import benchmarks
from benchmarks import _spark

KERNEL_SCENARIOS = ("actor_tell", "actor_ask", "process_roundtrip", "process_batched",
                    "cpu_scaling")
RUNTIME_SCENARIOS = ("pipeline_inproc", "pipeline_pool", "pipeline_tuned", "pipeline_pinned",
                     "fanout_cpu", "broadcast_fanout", "batching", "latency",
                     "memory_flow_control")
SPARK_SCENARIOS = ("spark_source", "spark_sink")
JSON_KEYS = {"name", "value", "unit", "baseline", "baseline_value", "ratio", "target"}
NOT_YET = "runtime.spark measurement not available yet"


def test_every_scenario_of_the_suite_is_covered_here() -> None:
    names = [scenario.name for scenario in benchmarks.SCENARIOS]

    assert names == [*KERNEL_SCENARIOS, *RUNTIME_SCENARIOS, *SPARK_SCENARIOS]


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
        "pipeline_pool/publish1", "pipeline_pinned/free", "pipeline_pinned/ordered",
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


def test_unknown_scenario_is_refused_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "b.json"

    code = benchmarks.main(["--smoke", "--only", "no_such_scenario", "--json", str(path)])

    assert code == 2
    assert not path.exists()


def _oriented_ratio(row: dict[str, Any]) -> float:
    higher_is_better = {s.name: s.higher_is_better for s in benchmarks.SCENARIOS}
    value, base = float(row["value"]), float(row["baseline_value"])
    return value / base if higher_is_better[row["name"].split("/")[0]] else base / value
