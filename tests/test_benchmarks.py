"""The benchmark suite runs end to end (tiny sizes) and reports in the documented shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks

KERNEL_SCENARIOS = ("actor_tell", "actor_ask", "process_roundtrip", "process_batched",
                    "cpu_scaling")
JSON_KEYS = {"name", "value", "unit", "baseline", "baseline_value", "ratio", "target"}


@pytest.mark.timeout(60)
def test_smoke_run_gives_every_kernel_scenario_a_number(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"

    code = benchmarks.main(["--smoke", "--only", *KERNEL_SCENARIOS, "--json", str(path)])

    assert code == 0
    rows = json.loads(path.read_text(encoding="utf-8"))["results"]
    main_rows = [row for row in rows if "/" not in row["name"]]
    assert [row["name"] for row in main_rows] == list(KERNEL_SCENARIOS)
    for row in rows:
        assert set(row) == JSON_KEYS, row
        assert isinstance(row["value"], float) and row["value"] > 0, row
        assert isinstance(row["baseline_value"], float) and row["baseline_value"] > 0, row
        assert row["ratio"] == pytest.approx(_oriented_ratio(row)), row
    printed = capsys.readouterr().out
    assert all(name in printed for name in KERNEL_SCENARIOS)


def test_unknown_scenario_is_refused_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "b.json"

    code = benchmarks.main(["--smoke", "--only", "no_such_scenario", "--json", str(path)])

    assert code == 2
    assert not path.exists()


def _oriented_ratio(row: dict[str, object]) -> float:
    value, base = float(row["value"]), float(row["baseline_value"])  # type: ignore[arg-type]
    return base / value if row["unit"] == "us" else value / base
