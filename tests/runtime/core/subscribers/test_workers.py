"""Process members: a group's handler in worker processes (issue 3 item 11)."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from runtime import BatchSettings, Bus, Delivery, Nack
from runtime.core.subscribers._work_batch import WORKER_COLLECT_AFTER
from runtime.core.subscribers._workers import PROCESS_BATCH
from runtime.errors import WouldBlock


def _burn(delivery: Delivery[int]) -> int:
    return sum(range(2_000 + delivery.message % 7))


def test_group_with_two_workers_runs_the_handler_in_two_processes(tmp_path: Path) -> None:
    def handler(delivery: Delivery[int]) -> None:
        _burn(delivery)
        (tmp_path / str(os.getpid())).touch()
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=1000)
        topic.subscribe(handler, group="g", workers=2)

        reports = [topic.publish(n) for n in range(2_000)]

        assert topic.join(timeout=60)
        assert all(r.outcome.result(timeout=5).acked for r in reports)
        pids = {int(p.name) for p in tmp_path.iterdir()}
        assert len(pids) == 2
        assert os.getpid() not in pids
        assert topic.stats().delivered == 2_000


def test_each_small_burst_of_cpu_heavy_messages_uses_every_worker(tmp_path: Path) -> None:
    """Cheap handlers get whole hand-overs (fewer of them); heavy ones must still be
    split, or a burst would run on one worker while the other idles."""

    def heavy(delivery: Delivery[Any]) -> None:
        sum(range(1_000_000))  # ~20 ms of CPU here
        (tmp_path / f"{delivery.message.data.decode()}-{os.getpid()}").touch()

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(heavy, group="g", workers=2, auto_ack=True)
        publisher = topic.publisher(batching=BatchSettings(max_messages=8, max_latency=60))
        for burst in range(3):
            for n in range(8):
                publisher.publish(b"%d" % (burst * 8 + n))
            publisher.flush(30)
            assert topic.join(timeout=60)

    handled = [name.split("-") for name in (p.name for p in tmp_path.iterdir())]
    assert sorted(int(n) for n, _ in handled) == list(range(24))
    for burst in range(3):
        pids = {pid for n, pid in handled if int(n) // 8 == burst}
        assert len(pids) == 2, (burst, pids)


def test_worker_settlements_and_errors_cross_back() -> None:
    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 1:
            delivery.nack("odd one")
        elif delivery.message == 2:
            raise ValueError("broken")

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(handler, group="g", workers=1, auto_ack=True)

        outcomes = [topic.publish(n).outcome.result(timeout=30) for n in range(3)]

        assert outcomes[0].acked
        assert outcomes[1].nacks == (Nack("group:g", "nack", "odd one"),)
        assert outcomes[2].nacks == (Nack("group:g", "error", "broken"),)


def test_killed_worker_loses_nothing_and_is_replaced() -> None:
    total = 10_000

    def handler(delivery: Delivery[Any]) -> None:
        if delivery.message == "hold":
            if delivery.attempt == 1:
                threading.Event().wait()  # this worker holds the delivery until it is killed
        else:
            _burn(delivery)
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t", max_delivery_attempts=2, balanced_capacity=512)
        topic.subscribe(handler, group="g", workers=2)
        held = topic.publish("hold")
        victim = _the_worker_holding_work(bus)

        for n in range(total):
            topic.publish(n)
            if n == total // 4:
                os.kill(victim, signal.SIGKILL)

        assert held.outcome.result(timeout=60).acked  # redelivered to a live worker
        assert topic.join(timeout=60)
        stats = topic.stats()
        letters = list(topic.dead_letters)
        assert stats.pending == 0
        assert stats.delivered + len(letters) == total + 1
        assert {d.reason for d in letters} <= {"worker_crashed"}
        assert stats.redelivered >= 1  # at least the held delivery came back
        after = _wait_for_workers(bus, 2)
        assert victim not in after
        assert len(after) == 2


def _the_worker_holding_work(bus: Bus, timeout: float = 10.0) -> int:
    """The pid of the one worker with an unanswered batch (polls status, bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [s.pid for s in bus.system.status().values()
                if s.kind == "process" and s.mailbox > 0 and s.pid]
        if len(busy) == 1:
            return busy[0]
    raise AssertionError("no single worker took the held delivery")


def _worker_pids(bus: Bus) -> set[int]:
    return {
        s.pid for s in bus.system.status().values()
        if s.kind == "process" and s.alive and s.pid and psutil.pid_exists(s.pid)
    }


def _wait_for_workers(bus: Bus, count: int, timeout: float = 20.0) -> set[int]:
    deadline = time.monotonic() + timeout
    pids = _worker_pids(bus)
    while len(pids) < count and time.monotonic() < deadline:
        bus.topic("t").join(timeout=0.05)  # a bounded wait between status polls
        pids = _worker_pids(bus)
    return pids


def test_a_worker_process_collects_after_a_whole_hand_over_not_at_the_default(
    tmp_path: Path,
) -> None:
    parents = gc.get_threshold()

    def record_threshold(delivery: Delivery[int]) -> None:
        (tmp_path / f"{os.getpid()}-{gc.get_threshold()[0]}").touch()

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(record_threshold, group="g", workers=2, auto_ack=True)
        for n in range(40):
            topic.publish(n)
        assert topic.join(timeout=60)

    thresholds = {int(p.name.split("-")[1]) for p in tmp_path.iterdir()}
    assert thresholds == {WORKER_COLLECT_AFTER}
    assert WORKER_COLLECT_AFTER > 2 * PROCESS_BATCH  # a delivery and its envelope each
    assert gc.get_threshold() == parents  # the parent's collector is the application's


def test_a_stuck_worker_group_that_blocks_publishes_is_named_by_held_by() -> None:
    def stuck(delivery: Delivery[int]) -> None:
        threading.Event().wait(30)  # never set: the worker holds its hand-over

    with Bus() as bus:
        topic = bus.create_topic("orders", balanced_capacity=2)
        topic.subscribe(stuck, group="billing", workers=1)
        accepted = 0
        try:
            while accepted < 1_000:
                topic.publish(accepted, timeout=0.3)
                accepted += 1
        except WouldBlock:
            held = topic.held_by()
        else:
            raise AssertionError("a stuck worker group took 1,000 publishes")

    assert held is not None and held.startswith("group 'billing' of topic 'orders' is full")
