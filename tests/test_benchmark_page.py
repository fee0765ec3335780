"""``python -m benchmarks.page`` renders the benchmark page and its chart from a results file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._harness import Result
from benchmarks.page import load_results, render_page

ROOT = Path(__file__).parent.parent
ROWS = [
    {"name": "actor_tell", "value": 4_000_000.0, "unit": "msg/s", "baseline": "pykka tell",
     "baseline_value": 500_000.0, "ratio": 8.0, "target": 1.0},
    {"name": "pipeline_pool/pool", "value": 800_000.0, "unit": "msg/s", "baseline": "mp.Pool | map",
     "baseline_value": 1_000_000.0, "ratio": 0.8, "target": 1.0},
    {"name": "broadcast_fanout", "value": 3.5, "unit": "us", "baseline": "8 queues",
     "baseline_value": 7.0, "ratio": 2.0, "target": None},
    {"name": "spark_source", "value": None, "unit": "rows/s", "baseline": "noop",
     "baseline_value": None, "ratio": None, "target": 0.5, "skipped": "no Java"},
]


def write_results(folder: Path) -> Path:
    path = folder / "results.json"
    path.write_text(json.dumps({"results": ROWS}), encoding="utf-8")
    return path


def run_page(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.page", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_page_renders_the_table_the_chart_and_the_machine(tmp_path: Path) -> None:
    results = write_results(tmp_path)
    page, chart = tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "img" / "ratios.svg"

    result = run_page(results, page, chart, "--profile", "quick", "--machine", "a test box, 2 vCPUs")

    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    assert "![Each scenario's ratio against its baseline, with its target](img/ratios.svg)" in text
    run = "`python -m benchmarks --quick --json results.json`"
    assert f"Profile **quick** ({run}) on a test box, 2 vCPUs." in text
    assert "1 of the 2 rows with a target met it." in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `actor_tell` | 4,000,000 | msg/s | pykka tell | 500,000 | 8.00 | >= 1 | ok |",
        "| `pipeline_pool/pool` | 800,000 | msg/s | mp.Pool \\| map | 1,000,000 | 0.80 | >= 1 | MISS |",
        "| `broadcast_fanout` | 3.5 | us | 8 queues | 7 | 2.00 | - |  |",
        "| `spark_source` | - | rows/s | noop | - | - | >= 0.5 | skipped: no Java |",
    ]
    assert "## Method" in text and "## Reproduce" in text
    svg = chart.read_text(encoding="utf-8")
    assert svg.startswith("<?xml") and "<svg" in svg
    charted = [name for name in ("actor_tell", "pipeline_pool/pool", "broadcast_fanout", "spark_source")
               if f">{name}<" in svg]
    assert charted == ["actor_tell", "pipeline_pool/pool", "broadcast_fanout"]  # no ratio, no bar


def test_the_same_results_give_the_same_chart(tmp_path: Path) -> None:
    results = write_results(tmp_path)

    first = run_page(results, tmp_path / "a.md", tmp_path / "a.svg", "--machine", "m")
    second = run_page(results, tmp_path / "b.md", tmp_path / "b.svg", "--machine", "m")

    assert first.returncode == second.returncode == 0
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_a_file_that_is_not_a_results_document_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}), encoding="utf-8")

    result = run_page(bad, tmp_path / "page.md", tmp_path / "chart.svg")

    assert result.returncode == 2
    assert "expected an object with a 'results' list" in result.stderr
    assert not (tmp_path / "page.md").exists()


def test_a_row_without_the_documented_keys_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"name": "x"}]}), encoding="utf-8")

    with pytest.raises(ValueError, match="documented keys"):
        load_results(bad)


def test_a_full_run_page_names_no_profile_flag() -> None:
    results = [Result(**ROWS[0])]  # type: ignore[arg-type]

    text = render_page(results, chart="img/r.svg", profile="full", machine="m")

    assert "`python -m benchmarks --json results.json`" in text
    assert "1 of the 1 rows with a target met it." in text

