"""What `ActorSystem.status()` reports per actor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import psutil

if TYPE_CHECKING:
    from actors._cell import Cell

__all__ = ["ActorStatus", "ProcessMeter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorStatus:
    """A snapshot of one actor.

    Attributes:
        name: the actor's name.
        kind: ``"thread"`` or ``"process"``.
        alive: False once stopped for good.
        restarts: how often it was restarted.
        mailbox: messages waiting (process actors: sent and not yet handled).
        pid: the process id of a process actor, else None.
        rss: resident memory in bytes of a process actor, else None.
        cpu_percent: CPU use of a process actor since the previous ``status()``, else None.
    """

    name: str
    kind: Literal["thread", "process"]
    alive: bool
    restarts: int
    mailbox: int
    pid: int | None
    rss: int | None
    cpu_percent: float | None


class ProcessMeter:
    """Keeps one psutil handle per pid so that CPU figures are deltas between calls."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def status(self, cell: Cell) -> ActorStatus:
        pid = cell.pid
        rss: int | None = None
        cpu: float | None = None
        if pid is not None:
            try:
                proc = self._procs.get(pid)
                if proc is None:
                    proc = self._procs[pid] = psutil.Process(pid)
                    proc.cpu_percent(None)
                with proc.oneshot():
                    rss = proc.memory_info().rss
                    cpu = proc.cpu_percent(None)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._procs.pop(pid, None)
        return ActorStatus(
            name=cell.name, kind="process" if cell.kind == "process" else "thread",
            alive=not cell.dead, restarts=cell.restarts, mailbox=cell.mailbox_size(),
            pid=pid, rss=rss, cpu_percent=cpu,
        )
