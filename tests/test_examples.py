"""Every example runs to completion, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))
NEEDS_SPARK = {"spark_pipeline.py"}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    if script.name in NEEDS_SPARK:
        pytest.importorskip("pyspark", reason="the Spark example needs pyspark")

    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=240, cwd=tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), "an example should show what it did"
    first_line = script.read_text().split('"""')[1].strip()
    assert first_line, "every example starts with a docstring"
