"""Pools: routers, supervision of members, resize."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from actors import Actor, ActorSystem, Event
from actors.errors import WorkerCrashedError


class Keyed(Actor):
    """Returns (pid, key, seq); remembers the order it saw per key."""

    def __init__(self) -> None:
        super().__init__()
        self.order: dict[str, list[int]] = {}

    def on_receive(self, message: Any) -> Any:
        if message == "orders":
            return self.order
        if message == "pid":
            return os.getpid()
        key, seq = message
        self.order.setdefault(key, []).append(seq)
        return (os.getpid(), key, seq)


class Pid(Actor):
    def on_receive(self, message: Any) -> Any:
        return os.getpid()


class MarkSlow(Actor):
    def on_receive(self, message: Any) -> Any:
        if message == "be-slow":
            os.environ["ACTORBUS_SLOW"] = "1"
            return "ok"
        if message == "pid":
            return os.getpid()
        if os.environ.get("ACTORBUS_SLOW") == "1":
            time.sleep(0.005)  # sleep-ok: the deliberately slow member's work
        return os.getpid()


@pytest.fixture
def system() -> Any:
    with ActorSystem("pools") as system:
        yield system


def test_key_hash_pool_keeps_per_key_order(system: ActorSystem) -> None:
    pool = system.pool(Keyed, size=4, router="key_hash")
    keys = [f"k{i}" for i in range(20)]

    futures = [pool.ask((keys[i % 20], i), key=keys[i % 20], timeout=30) for i in range(10_000)]
    results = [f.result(30) for f in futures]

    pid_of_key: dict[str, set[int]] = {}
    for pid, key, _ in results:
        pid_of_key.setdefault(key, set()).add(pid)
    assert all(len(pids) == 1 for pids in pid_of_key.values())
    assert len({pid for pids in pid_of_key.values() for pid in pids}) == 4
    orders: dict[str, list[int]] = {}
    for member in pool.members():
        orders.update(member.ask("orders", timeout=10).result(10))
    assert orders == {k: [i for i in range(10_000) if i % 20 == n] for n, k in enumerate(keys)}


def test_round_robin_rotates_strictly(system: ActorSystem) -> None:
    pool = system.pool(Keyed, size=3, router="round_robin", process=False)

    results = [pool.ask(("k", i)).result(5) for i in range(9)]

    assert [pool.members()[i % 3].name for i in range(9)] == [m.name for m in pool.members()] * 3
    assert len(results) == 9


def test_least_busy_gives_a_slow_member_fewer_messages(system: ActorSystem) -> None:
    pool = system.pool(MarkSlow, size=3, router="least_busy")
    slow = pool.members()[0]
    slow.ask("be-slow").result(10)
    slow_pid = slow.ask("pid").result(10)

    futures = [pool.ask(i, timeout=60) for i in range(600)]
    counts = Counter(f.result(60) for f in futures)

    fast = [n for pid, n in counts.items() if pid != slow_pid]
    assert len(fast) == 2
    assert counts[slow_pid] < min(fast)


def test_crashed_member_is_replaced_and_the_pool_keeps_serving(system: ActorSystem) -> None:
    restarted = threading.Event()
    system.events.subscribe(lambda e: restarted.set() if e.kind == "restarted" else None)
    pool = system.pool(Keyed, size=2, name="workers")
    victim = pool.members()[0]
    pid = victim.ask("pid").result(10)

    os.kill(pid, signal.SIGKILL)
    assert restarted.wait(5)
    answers = [pool.ask(("k", i), timeout=10).result(10) for i in range(20)]

    assert victim.ask("pid").result(10) != pid
    assert len(answers) == 20
    assert pool.size == 2


class DiesOnRequest(Actor):
    """Kills its own process on ``"die"``; answers its pid to anything else."""

    def on_receive(self, message: Any) -> Any:
        if message == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        return os.getpid()


def test_killed_member_fails_only_the_ask_it_was_running(system: ActorSystem) -> None:
    pool = system.pool(DiesOnRequest, size=2, router="round_robin")
    pids = {m.ask("pid").result(10) for m in pool.members()}

    dying = pool.ask("die", timeout=30)
    queued = [pool.ask(n, timeout=30) for n in range(100)]  # half of them behind "die"

    with pytest.raises(WorkerCrashedError) as crashed:
        dying.result(30)
    answers = [f.result(30) for f in queued]
    assert crashed.value.started
    assert len(answers) == 100
    assert set(answers) <= pids | {m.ask("pid").result(10) for m in pool.members()}
    assert pool.size == 2


def test_resize_grows_and_shrinks_and_in_flight_asks_complete(system: ActorSystem) -> None:
    events: list[Event] = []
    system.events.subscribe(events.append)
    pool = system.pool(Pid, size=1, process=False, router="round_robin")

    pool.resize(3)
    assert pool.size == 3
    in_flight = [pool.ask("pid") for _ in range(30)]
    pool.resize(1)

    assert pool.size == 1
    assert all(isinstance(f.result(10), int) for f in in_flight)
    stopped = [e.name for e in events if e.kind == "stopped"]
    assert len(stopped) == 2


def test_pool_rejects_bad_arguments(system: ActorSystem) -> None:
    with pytest.raises(ValueError):
        system.pool(Keyed, size=0)
    with pytest.raises(ValueError):
        system.pool(Keyed, size=2, router="random")  # type: ignore[arg-type]
