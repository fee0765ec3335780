"""Careless input to the kernel (issue 17, items 7, 14, 15): nothing hangs, nothing leaks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.processes import running_after

from actors import Actor, ActorSystem
from actors.errors import SpawnError

pytestmark = pytest.mark.reliability


class Refused(Exception):
    """Pickles, but does not unpickle: ``__init__`` takes a keyword-only argument."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"refused with code {code}")
        self.code = code


class Worker(Actor):
    """Returns what it gets; ``"bad"`` returns a `Refused`; ``"spawn"`` starts a subprocess."""

    def __init__(self) -> None:
        super().__init__()
        self.children: list[subprocess.Popen[bytes]] = []

    def on_receive(self, message: Any) -> Any:
        if message == "bad":
            return Refused(code=7)
        if message == "spawn":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # sleep-ok
            self.children.append(child)
            return child.pid
        if message == "pid":
            return os.getpid()
        return message


class FailsSecond(Actor):
    """Starts once; every later instance fails ``on_start`` (a marker file tells them apart)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def on_start(self) -> None:
        if os.path.exists(self.marker):
            raise RuntimeError("the second member refuses to start")
        Path(self.marker).touch()

    def on_receive(self, message: Any) -> Any:
        return message


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaps counts as exited)."""
    try:
        return not running_after([psutil.Process(pid)], timeout)
    except psutil.NoSuchProcess:
        return True


# -- 7. a reply that does not unpickle in the parent fails alone ----------------------------

def test_an_unloadable_reply_fails_its_ask_alone() -> None:
    with ActorSystem("replies") as system:
        ref = system.spawn(Worker, name="w", process=True)
        ref.ask("warm").result(30)

        for i in range(5):
            ref.tell(i)
        before = [ref.ask(f"before-{i}", timeout=None) for i in range(3)]
        bad = ref.ask("bad", timeout=None)
        after = [ref.ask(f"after-{i}", timeout=None) for i in range(3)]
        ref.tell("last-tell")

        error = bad.exception(10)
        assert [f.result(10) for f in before] == ["before-0", "before-1", "before-2"]
        assert [f.result(10) for f in after] == ["after-0", "after-1", "after-2"]
        assert isinstance(error, TypeError)
        assert "cannot be unpickled in the parent" in str(error) and "'w'" in str(error)
        assert ref.ask("sync").result(10) == "sync"
        assert system.status()["w"].mailbox == 0  # every tell was acknowledged
        assert system.status()["w"].restarts == 0
        assert len(system.dead_letters) == 0


# -- 14. subprocesses started by a handler die with their worker ----------------------------

@pytest.mark.parametrize("end", ["worker-killed", "pool-stop", "shutdown"])
def test_subprocesses_of_a_handler_die_with_their_worker(end: str) -> None:
    system = ActorSystem("groups")
    restarted = threading.Event()
    system.events.subscribe(lambda e: e.kind == "restarted" and restarted.set())
    try:
        pool = system.pool(Worker, size=1, name="p")
        worker_pid = pool.ask("pid").result(30)
        grandchild = pool.ask("spawn").result(30)
        assert psutil.pid_exists(grandchild)

        if end == "worker-killed":
            os.kill(worker_pid, signal.SIGKILL)
            assert restarted.wait(30)
            replacement = pool.ask("pid", timeout=30).result(30)
            assert replacement != worker_pid  # the pool keeps serving
            assert _gone(grandchild), f"{grandchild} outlived its SIGKILLed worker"
        elif end == "pool-stop":
            pool.stop()
            assert _gone(grandchild), f"{grandchild} outlived pool.stop()"
    finally:
        system.shutdown(timeout=10)

    assert _gone(grandchild), f"{grandchild} outlived shutdown()"


# -- 15. a failed pool start stops what it started ------------------------------------------

def test_a_pool_whose_second_member_fails_to_start_leaves_nothing_running(tmp_path: Path) -> None:
    marker = str(tmp_path / "first-started")
    with ActorSystem("pools") as system:
        before = {p.pid for p in psutil.Process().children(recursive=True)}

        with pytest.raises(SpawnError, match="refuses to start"):
            system.pool(FailsSecond, marker, size=3, name="p")
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        alive = running_after(left, timeout=10)

        assert os.path.exists(marker)  # the first member did start
        assert alive == []
        assert set(system.status()) == {"pools"}
        assert system.spawn(FailsSecond, str(tmp_path / "other"), name="p-0").ask(1).result(5) == 1
