"""The README's quickstart runs exactly as printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def quickstart_block() -> str:
    """The first ```python block under '## Quickstart'."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the Quickstart section has a ```python block"
    return match.group(1)


def test_readme_quickstart_runs_as_printed(tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart_block(), encoding="utf-8")

    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert "billing {'order': 1, 'amount': 42} for customer-7" in result.stdout
    assert "audit saw {'order': 1, 'amount': 42}" in result.stdout
    assert "Outcome(acked=True, nacks=())" in result.stdout
    assert "delivered=1" in result.stdout
    # Two handlers print from two threads: each line must stay whole (issue 15 item 8).
    handler_lines = [line for line in result.stdout.splitlines() if "saw" in line or "billing" in line]
    assert sorted(handler_lines) == [
        "audit saw {'order': 1, 'amount': 42}", "billing {'order': 1, 'amount': 42} for customer-7",
    ]


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")

    first_block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)

    assert first_block is not None
    lines = first_block.group(1).strip().splitlines()
    assert lines[0].endswith("&& actorbus demo")
    assert "pip install -e '.[spark,test]'" in lines[0]
    assert lines[1] == "python -m pytest"


def test_readme_lists_every_example() -> None:
    text = README.read_text(encoding="utf-8")
    examples = sorted(p.name for p in (README.parent / "examples").glob("*.py"))

    missing = [name for name in examples if f"`{name}`" not in text]

    assert examples and not missing
