"""Waiting for processes to end, where an orphan's zombie counts as ended."""

from __future__ import annotations

import time
from collections.abc import Iterable

import psutil


def _exited(proc: psutil.Process) -> bool:
    """True for a process that is gone or a zombie: it has exited, only its reaping is left.

    An orphan is reaped by PID 1, and a container's PID 1 may reap late or never.
    """
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def running_after(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes of ``procs`` that have not exited within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = list(procs)
    while True:
        _, left = psutil.wait_procs(left, timeout=0.05)
        left = [proc for proc in left if not _exited(proc)]
        if not left or time.monotonic() >= deadline:
            return left
