"""Reliability under process faults (issue 7, items 1-4): SIGKILL, host death, hangs, exits."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.processes import running_after
from support.reliability import (  # noqa: F401 (figures is a fixture)
    RestartWatch,
    append_line,
    figures,
    read_lines,
    worker_pids,
)

from runtime import Bus, Delivery

pytestmark = pytest.mark.reliability


def _recorder(directory: str) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        append_line(directory, str(delivery.message))
        delivery.ack()

    return handler


# -- 1. SIGKILL random pool workers while messages flow -------------------------------------------

@pytest.mark.timeout(600)
def test_sigkilled_workers_lose_nothing_and_are_replaced_within_a_second(
    tmp_path: Path, soak: bool, figures: Any,  # noqa: F811
) -> None:
    total = 500_000 if soak else 50_000
    kills = 30 if soak else 10
    rng = random.Random(1207)
    kill_points = {total * (i + 1) // (kills + 1) for i in range(kills)}
    recoveries: list[float] = []
    victims: list[int] = []

    with Bus() as bus:
        watch = RestartWatch(bus.system)
        topic = bus.create_topic("t", max_delivery_attempts=3, balanced_capacity=1024)
        topic.subscribe(_recorder(str(tmp_path)), group="g", workers=4)
        started = time.monotonic()
        reports = []
        for n in range(total):
            reports.append(topic.publish(n))
            if n in kill_points:
                name, pid = rng.choice(sorted(worker_pids(bus).items()))
                killed_at = time.time()
                os.kill(pid, signal.SIGKILL)
                victims.append(pid)
                replaced_at = watch.restarted_after(name, killed_at, timeout=10.0)
                assert replaced_at is not None, f"{name} (pid {pid}) not replaced within 10 s"
                recoveries.append(replaced_at - killed_at)

        assert topic.join(timeout=300)
        elapsed = time.monotonic() - started
        stats = topic.stats()
        letters = list(topic.dead_letters)
        outcomes = [r.outcome.result(timeout=5) for r in reports]
        survivors = worker_pids(bus)

    handled = collections.Counter(int(line) for line in read_lines(tmp_path))
    acked = sum(o.acked for o in outcomes)
    duplicates = sum(count - 1 for count in handled.values() if count > 1)
    lost = total - acked - len(letters)
    figures(messages=total, faults=kills, lost=lost, duplicates=duplicates,
            dead_lettered=len(letters), redelivered=stats.redelivered,
            recovery_max_s=round(max(recoveries), 3),
            recovery_mean_s=round(sum(recoveries) / len(recoveries), 3),
            seconds=round(elapsed, 1))
    assert len(victims) == kills
    assert stats.published == total
    assert stats.pending == 0
    assert lost == 0
    assert stats.delivered == acked
    assert stats.dead_lettered == len(letters)
    assert {d.reason for d in letters} <= {"worker_crashed"}
    assert all(handled[m] >= 1 for m, o in enumerate(outcomes) if o.acked)
    assert max(recoveries) <= 1.0, recoveries
    assert len(survivors) == 4
    assert not set(victims) & set(survivors.values())


# -- 2. SIGKILL the process hosting a Bus ---------------------------------------------------------

_HOST = textwrap.dedent("""
    import json, sys, threading
    from runtime import Bus

    def handle(delivery):
        sum(range(500))
        delivery.ack()

    bus = Bus()
    topic = bus.create_topic("t", balanced_capacity=256)
    topic.subscribe(handle, group="a", workers=2)
    topic.subscribe(handle, group="b", workers=2)
    topic.publish(0).outcome.result(timeout=30)

    def flood():
        n = 0
        while True:
            topic.publish(n)
            n += 1

    threading.Thread(target=flood, daemon=True).start()
    pids = sorted(s.pid for s in bus.system.status().values() if s.pid)
    print(json.dumps(pids), flush=True)
    sys.stdin.read()
""")


@contextmanager
def _bus_host(script: str, env: dict[str, str] | None = None,
              ) -> Iterator[tuple[subprocess.Popen[str], list[int], list[psutil.Process]]]:
    """A process running ``script`` (which prints its worker pids as a JSON line, then
    waits): yields it, those pids and its descendants; kills what is left on exit."""
    host = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env,
    )
    descendants: list[psutil.Process] = []
    try:
        assert host.stdout is not None
        workers = json.loads(host.stdout.readline())
        descendants = psutil.Process(host.pid).children(recursive=True)
        yield host, workers, descendants
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
        for proc in descendants:
            if proc.is_running():
                proc.kill()


def test_killed_bus_host_leaves_no_descendant_alive(figures: Any) -> None:  # noqa: F811
    with _bus_host(_HOST) as (host, workers, descendants):
        killed_at = time.monotonic()
        os.kill(host.pid, signal.SIGKILL)
        host.wait(timeout=10)
        alive = running_after(descendants, timeout=2.0)
        cleared = time.monotonic() - killed_at

        figures(messages="flowing", faults=1, descendants=len(descendants),
                workers=len(workers), alive_after_2s=len(alive), recovery_s=round(cleared, 3))
        assert len(workers) == 4
        assert set(workers) <= {p.pid for p in descendants}
        assert alive == [], [(p.pid, p.name()) for p in alive]


_QUIET_HOST = textwrap.dedent("""
    import json, sys
    from runtime import Bus

    bus = Bus()
    topic = bus.create_topic("t")
    topic.subscribe(lambda delivery: delivery.ack(), group="a", workers=2)
    for n in range(20):  # both workers have run hand-overs: both mapped the slots
        topic.publish(n).outcome.result(timeout=30)
    assert topic.join(30)
    print(json.dumps(sorted(s.pid for s in bus.system.status().values() if s.pid)), flush=True)
    sys.stdin.read()
""")


def test_killed_bus_host_leaves_no_progress_file_behind(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    with _bus_host(_QUIET_HOST, env) as (host, workers, descendants):
        os.kill(host.pid, signal.SIGKILL)
        host.wait(timeout=10)
        alive = running_after(descendants, timeout=10.0)

        assert len(workers) == 2
        assert alive == [], [(p.pid, p.name()) for p in alive]
        assert sorted(p.name for p in tmp_path.rglob("actorbus-progress-*")) == []


# -- 3. A handler that hangs for ever -------------------------------------------------------------

def _hanging(directory: str) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 3:
            try:  # only the first delivery ever of message 3 hangs (O_EXCL: one winner)
                fd = os.open(os.path.join(directory, "hung"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, f"{os.getpid()} {time.time()}".encode())
                os.close(fd)
                threading.Event().wait()  # hangs for ever: only the watchdog ends this process
        append_line(directory, str(delivery.message))
        delivery.ack()

    return handler


def test_hung_handler_times_out_and_its_worker_is_replaced(tmp_path: Path, figures: Any) -> None:  # noqa: F811
    total = 200
    ack_timeout = 0.5  # the runtime derives stuck_after = max(1.0, 2 * ack_timeout)

    with Bus() as bus:
        watch = RestartWatch(bus.system)
        topic = bus.create_topic("t", ack_timeout=ack_timeout, max_delivery_attempts=5)
        topic.subscribe(_hanging(str(tmp_path)), group="g", workers=2)
        names = {pid: name for name, pid in worker_pids(bus).items()}

        reports = [topic.publish(n) for n in range(total)]
        assert topic.join(timeout=60)
        stats = topic.stats()
        letters = list(topic.dead_letters)
        outcomes = [r.outcome.result(timeout=5) for r in reports]
        hung_pid, hung_at = (tmp_path / "hung").read_text().split()
        name = names[int(hung_pid)]
        replaced_at = watch.restarted_after(name, float(hung_at), timeout=10.0)
        after = worker_pids(bus)

    acked = sum(o.acked for o in outcomes)
    recovery = None if replaced_at is None else replaced_at - float(hung_at)
    figures(messages=total, faults=1, lost=total - acked - len(letters),
            timed_out=stats.timed_out, dead_lettered=len(letters),
            redelivered=stats.redelivered,
            recovery_s=None if recovery is None else round(recovery, 3))
    assert recovery is not None, "the hung worker was never replaced"
    assert recovery <= 1.0 + 1.0 + 1.5  # stuck_after + heartbeat grace + scheduling margin
    assert int(hung_pid) not in after.values()
    assert len(after) == 2
    assert stats.timed_out >= 1
    assert stats.redelivered >= 1
    assert stats.pending == 0
    assert acked + len(letters) == total
    assert {d.reason for d in letters} <= {"timeout", "worker_crashed"}
    assert outcomes[3].acked  # redelivered to a live worker and handled there


# -- 4. os._exit and sys.exit inside handlers -----------------------------------------------------

def _exiting(how: str, victim: int) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == victim and delivery.attempt == 1:
            if how == "os._exit":
                os._exit(4)
            sys.exit(3)
        delivery.ack()

    return handler


def test_exiting_handler_restarts_only_its_worker(figures: Any) -> None:  # noqa: F811
    total = 400

    with Bus() as bus:
        watch = RestartWatch(bus.system)
        topic = bus.create_topic("t", max_delivery_attempts=2, ack_timeout=10.0)
        topic.subscribe(_exiting("os._exit", 5), group="hard", workers=2)
        topic.subscribe(_exiting("sys.exit", 7), group="soft", workers=2)
        topic.subscribe(_exiting("none", -1), group="steady", workers=2)
        thread_seen: list[int] = []
        topic.subscribe(lambda d: (thread_seen.append(d.message), d.ack()), group="threads")
        before = worker_pids(bus)

        reports = [topic.publish(n) for n in range(total)]
        assert topic.join(timeout=60)
        outcomes = [r.outcome.result(timeout=5) for r in reports]
        statuses = {n: s for n, s in bus.system.status().items() if s.kind == "process"}
        after = worker_pids(bus)
        stats = topic.stats()

    restarts = {
        group: sorted(s.restarts for n, s in statuses.items() if n.startswith(f"bus/t/workers:{i}-"))
        for i, group in enumerate(("hard", "soft", "steady"), start=1)
    }
    failed = sorted({e.name for e in watch.events if e.kind == "failed"})
    figures(messages=total, faults=2, lost=total - sum(o.acked for o in outcomes),
            restarts=restarts, failed=failed)
    assert all(o.acked for o in outcomes)
    assert stats.pending == 0 and stats.dead_lettered == 0
    assert restarts == {"hard": [0, 1], "soft": [0, 1], "steady": [0, 0]}
    assert len(failed) == 2 and all(n.startswith(("bus/t/workers:1-", "bus/t/workers:2-")) for n in failed)
    steady = {n: p for n, p in before.items() if n.startswith("bus/t/workers:3-")}
    assert steady == {n: p for n, p in after.items() if n.startswith("bus/t/workers:3-")}
    assert sorted(thread_seen) == list(range(total))


# -- 1b. The same through a Publisher: messages cross the topic as columns (blocks) ---------------

def _column_recorder(directory: str) -> Any:
    def handler(delivery: Delivery[Any]) -> None:
        message = delivery.message
        append_line(directory, json.dumps([
            message.message_id, message.ordering_key, dict(message.attributes),
            message.data.decode(), message.publish_time > 0]))
        delivery.ack()

    return handler


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ordering", [False, True])
def test_sigkilled_workers_lose_nothing_of_publisher_batches_and_mix_up_no_column(
    tmp_path: Path, ordering: bool,
) -> None:
    total, kills = 20_000, 4
    kill_points = {total * (i + 1) // (kills + 1) for i in range(kills)}
    rng = random.Random(31)
    sent: dict[str, tuple[str | None, dict[str, str], str]] = {}

    with Bus() as bus:
        watch = RestartWatch(bus.system)
        topic = bus.create_topic("t", max_delivery_attempts=3, balanced_capacity=1024)
        topic.subscribe(_column_recorder(str(tmp_path)), group="g", workers=2)
        publisher = topic.publisher(message_ordering=ordering)
        futures = []
        for n in range(total):
            key = f"k{n % 5}" if ordering and n % 7 else None
            attributes = {"n": str(n)} if n % 3 == 0 else {}
            futures.append((publisher.publish(str(n).encode(), attributes, key), key, attributes, n))
            if n in kill_points:
                name, pid = rng.choice(sorted(worker_pids(bus).items()))
                killed_at = time.time()
                os.kill(pid, signal.SIGKILL)
                assert watch.restarted_after(name, killed_at, timeout=10.0) is not None
        publisher.flush(60)
        for future, key, attributes, n in futures:
            sent[future.result(timeout=60)] = (key, attributes, str(n))
        assert topic.join(timeout=120)
        stats = topic.stats()
        letters = list(topic.dead_letters)

    handled = [json.loads(line) for line in read_lines(tmp_path)]
    assert stats.published == total and stats.pending == 0
    assert stats.delivered + stats.dead_lettered == total
    assert {d.reason for d in letters} <= {"worker_crashed"}
    acked_or_lettered = {m[0] for m in handled} | {d.message_id for d in letters}
    assert acked_or_lettered == set(sent)
    for message_id, key, attributes, data, stamped in handled:
        assert (key, attributes, data) == sent[message_id] and stamped


# -- A killed worker settles only what it was running (DESIGN §3.11) -------------------------------

def test_sigkilled_worker_settles_only_the_delivery_it_was_running() -> None:
    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 77:
            os.kill(os.getpid(), signal.SIGKILL)
        sum(range(20_000))  # a little work each, so that hand-overs queue up
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t")  # one delivery attempt
        topic.subscribe(handler, group="g", workers=2)
        reports = [topic.publish(n) for n in range(200)]
        outcomes = [r.outcome.result(timeout=60) for r in reports]
        letters = list(topic.dead_letters)
        stats = topic.stats()

    assert [(d.message_id, d.reason) for d in letters] == [(reports[77].message_id, "worker_crashed")]
    assert [n for n, o in enumerate(outcomes) if not o.acked] == [77]
    assert stats.delivered == 199 and stats.redelivered == 0 and stats.pending == 0
