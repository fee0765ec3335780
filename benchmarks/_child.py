"""Measurements that run in a fresh interpreter: its own session, killed whole on timeout.

A scenario whose measurement changes the interpreter (the collector's settings) or
starts what must end with it (Spark's JVM and Python workers) runs it as ``python -c``
from the repository root. The child prints one line ``RESULT <json>``; `run_child`
returns that object.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["ChildFailed", "run_child", "run_medians"]

_PREFIX = "RESULT "
# How long a `run_medians` child may take, by profile name.
_TIMEOUTS = {"full": 600.0, "quick": 300.0, "smoke": 60.0}


class ChildFailed(RuntimeError):
    """The child exited without a result line; ``stderr`` holds what it printed there."""

    def __init__(self, what: str, returncode: int, stderr: str) -> None:
        super().__init__(what, returncode, stderr)
        self.what = what
        self.returncode = returncode
        self.stderr = stderr

    def __str__(self) -> str:
        return f"{self.what} child exited {self.returncode}: {self.stderr[-400:]}"


def run_child(code: str, timeout: float, what: str) -> Any:
    """Run ``code`` in a new interpreter in its own session and return its result.

    The session (the child and every process it started) is killed when ``timeout``
    seconds pass, or when this call is interrupted.

    Raises:
        RuntimeError: the child did not finish within ``timeout`` seconds.
        ChildFailed: it exited without printing a result line.
    """
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except BaseException as exc:  # a timeout, or Ctrl-C (the child has its own session)
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise RuntimeError(f"{what} did not finish within {timeout:.0f} s") from None
        raise
    lines = [line for line in stdout.splitlines() if line.startswith(_PREFIX)]
    if child.returncode != 0 or not lines:
        raise ChildFailed(what, child.returncode, stderr)
    return json.loads(lines[-1].removeprefix(_PREFIX))


def run_medians(module: str, function: str, count: int, repeats: int, profile: str,
                what: str) -> dict[str, float]:
    """``benchmarks.<module>.<function>(count, repeats)``, a dict of medians, run in a
    fresh interpreter (within the ``profile``'s timeout).

    Raises:
        RuntimeError: as `run_child`.
    """
    code = (f"import json; from benchmarks.{module} import {function}; "
            f"print('{_PREFIX}' + json.dumps({function}({count}, {repeats})))")
    medians: dict[str, float] = run_child(code, _TIMEOUTS[profile], what)
    return medians
