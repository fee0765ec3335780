"""Process actors: the wire, crashes, orphans, status — under forkserver and spawn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import psutil
import pytest
from support.processes import running_after
from support.supervision import event_list

from actors import Actor, ActorSystem, ChildSpec, SupervisorSpec
from actors.errors import MessageNotSerializableError, WorkerCrashedError


class Echo(Actor):
    """Replies with what it gets; knows its pid; can fail, hang, or hold state."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "pid":
            return os.getpid()
        if message == "fail":
            raise RuntimeError("tell failure in a process")
        if message == "seen":
            return list(self.seen)
        if isinstance(message, tuple) and message[0] == "sleep":
            time.sleep(message[1])  # sleep-ok: simulates a slow handler in the worker
            return "slept"
        if isinstance(message, tuple) and message[0] == "spin":
            end = time.perf_counter() + message[1]
            while time.perf_counter() < end:  # a CPU-bound handler, holding the GIL
                pass
            return "spun"
        if isinstance(message, tuple) and message[0] == "wait":
            with open(message[1]) as fifo:  # blocks until the test writes it
                return fifo.read()
        self.seen.append(message)
        return message


class TreeHost(Actor):
    """A worker app embedding its own supervision tree inside its process."""

    def on_start(self) -> None:
        self.system = ActorSystem("inner")
        spec = SupervisorSpec(children=[ChildSpec(id="leaf", factory=Echo)])
        self.system.supervise(spec, name="inner-tree")

    def on_receive(self, message: Any) -> Any:
        return (os.getpid(), self.system.lookup("leaf").ask(message).result(5))

    def on_stop(self) -> None:
        self.system.shutdown(timeout=5)


@pytest.fixture(params=["forkserver", "spawn"])
def system(request: pytest.FixtureRequest) -> Any:
    with ActorSystem("proc", start_method=request.param) as system:
        yield system




def test_sigkill_is_detected_and_the_actor_restarted_within_a_second(system: ActorSystem) -> None:
    events, cond = event_list(system)
    ref = system.spawn(Echo, name="victim", process=True)
    pid = ref.ask("pid").result(10)
    in_flight = ref.ask(("sleep", 30), timeout=None)
    ref.tell("queued-tell")

    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerCrashedError):
        in_flight.result(5)
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 5)
    restarted_after = time.monotonic() - killed_at

    assert restarted_after < 1.0
    assert ref.ask("pid").result(10) not in (pid, os.getpid())
    crashed = [(d.message, d.reason) for d in system.dead_letters if d.recipient == "victim"]
    assert crashed == [("queued-tell", "crashed")]
    assert system.status()["victim"].restarts == 1


def test_unpicklable_message_fails_at_the_sender(system: ActorSystem) -> None:
    ref = system.spawn(Echo, process=True)

    with pytest.raises(MessageNotSerializableError) as caught:
        ref.tell(threading.Lock())
    with pytest.raises(TypeError):
        ref.ask(lambda: None)

    assert "cannot be pickled" in str(caught.value)
    assert ref.ask("still here").result(10) == "still here"


def test_status_reports_pid_rss_and_cpu(system: ActorSystem) -> None:
    refs = [system.spawn(Echo, name=f"s{i}", process=True) for i in range(2)]
    pids = {ref.ask("pid").result(10) for ref in refs}

    status = system.status()

    for i in range(2):
        entry = status[f"s{i}"]
        assert entry.kind == "process" and entry.alive
        assert entry.pid in pids
        assert entry.rss is not None and entry.rss > 1_000_000
        assert entry.cpu_percent is not None and entry.cpu_percent >= 0.0
    assert {status[f"s{i}"].pid for i in range(2)} == pids


def test_a_tree_runs_inside_a_process_actor(system: ActorSystem) -> None:
    host = system.spawn(TreeHost, name="app", process=True)

    pid, answer = host.ask("hello", timeout=20).result(20)

    assert answer == "hello"
    assert pid == system.status()["app"].pid


def test_stop_ends_the_process_after_its_mail(system: ActorSystem) -> None:
    ref = system.spawn(Echo, process=True)
    pid = ref.ask("pid").result(10)
    future = ref.ask(("sleep", 0.1))

    ref.stop(timeout=5)

    assert future.result(5) == "slept"  # mail handling itself: test_actor_kinds.py
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_replies_leave_while_a_later_handler_still_runs(system: ActorSystem, tmp_path: Any) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    ref = system.spawn(Echo, process=True)
    ref.ask("pid").result(10)

    long = ref.ask(("spin", 0.05))  # the two asks behind it arrive while it runs
    short = ref.ask("short")
    blocked = ref.ask(("wait", str(gate)))
    replies = (long.result(10), short.result(10))  # not held until the inbox is empty
    still_blocked = not blocked.done()
    with open(gate, "w") as fifo:
        fifo.write("released")

    assert replies == ("spun", "short")
    assert still_blocked
    assert blocked.result(10) == "released"


_PARENT = textwrap.dedent("""
    import sys, time
    from actors import Actor, ActorSystem

    class Idle(Actor):
        def on_receive(self, message):
            return message

    if __name__ == "__main__":
        system = ActorSystem("orphans", start_method=sys.argv[1])
        refs = [system.spawn(Idle, process=True) for _ in range(3)]
        for ref in refs:
            ref.ask("ready").result(30)
        print("ready", flush=True)
        time.sleep(60)  # sleep-ok: waits to be killed by the test
""")


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_killed_parent_leaves_no_workers_behind(tmp_path: Any, method: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    parent = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE,
                              text=True, cwd=tmp_path)
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "ready"
        descendants = psutil.Process(parent.pid).children(recursive=True)
        helpers = [p for p in psutil.Process(parent.pid).children()
                   if "forkserver" in " ".join(p.cmdline())
                   or "resource_tracker" in " ".join(p.cmdline())]
        assert len(descendants) - len(helpers) >= 3

        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        alive = running_after(descendants, timeout=2.0)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)

    assert alive == [], f"still alive 2 s after the parent died: {[p.pid for p in alive]}"


class Hangs(Actor):
    def on_receive(self, message: Any) -> Any:
        if message == "hang":
            while True:
                time.sleep(1)  # sleep-ok: a handler that never returns
        return os.getpid()


def test_a_hung_handler_is_detected_and_its_process_replaced(system: ActorSystem) -> None:
    events, cond = event_list(system)
    pool = system.pool(Hangs, size=1, name="hangs", stuck_after=0.5)
    pid = pool.ask("pid").result(10)
    started = time.monotonic()

    stuck = pool.ask("hang", timeout=None)

    with pytest.raises(WorkerCrashedError):
        stuck.result(10)
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 5)
    assert 0.5 <= time.monotonic() - started < 5.0
    assert pool.ask("pid").result(10) not in (pid, os.getpid())


def test_a_frozen_process_is_detected_by_its_missing_heartbeats(system: ActorSystem) -> None:
    events, cond = event_list(system)
    pool = system.pool(Hangs, size=1, name="frozen", stuck_after=0.5)
    pid = pool.ask("pid").result(10)

    os.kill(pid, signal.SIGSTOP)  # nothing in it runs any more, not even the watchdog
    try:
        with cond:
            assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 10)
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGCONT)

    assert pool.ask("pid").result(10) != pid
