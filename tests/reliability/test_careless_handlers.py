"""Careless input and handlers (issue 17, items 1, 2, 3, 5, 6): nothing lost, nothing hangs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.reliability import append_line, read_lines

from runtime import Bus, Delivery, Message
from runtime.errors import PublishError, SettlementError, WouldBlock

pytestmark = pytest.mark.reliability


# -- 1. keys that are not a str ---------------------------------------------------------------------

@pytest.mark.parametrize("key", [["a"], 7, b"k", ("a",)])
def test_a_key_that_is_not_a_str_is_refused_at_publish(key: Any) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=1.0)
        seen: list[int] = []
        for _ in range(2):
            topic.subscribe(lambda d: (seen.append(d.message), d.ack()), group="g")

        with pytest.raises(TypeError, match=type(key).__qualname__):
            topic.publish(0, key=key)
        reports = [topic.publish(n, key=f"k{n % 3}") for n in range(1, 21)]
        assert topic.join(timeout=10)
        stats = topic.stats()

    assert all(r.outcome.result(timeout=5).acked for r in reports)
    assert sorted(seen) == list(range(1, 21))
    assert (stats.published, stats.delivered, stats.pending) == (20, 20, 0)


def test_a_bad_ordering_key_is_refused_by_the_publisher_and_the_batch_path() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(lambda d: d.ack(), group="g")
        topic.subscribe(lambda d: d.ack(), group="g")
        publisher = topic.publisher()

        with pytest.raises(TypeError, match="list") as caught:
            publisher.publish(b"x", ordering_key=["a"])  # type: ignore[arg-type]
        batch = topic._publish_batch([Message(data=b"y", ordering_key=["b"])])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="list"):
            batch.result(timeout=5)
        publisher.close()
        assert topic.join(timeout=5)
        stats = topic.stats()
        topic.close()
        after = topic.stats()

    assert isinstance(caught.value, PublishError) and caught.value.code == 3
    assert (stats.published, stats.pending, after.pending) == (0, 0, 0)


# -- 2. ack deadlines start when a handler can see the delivery -------------------------------------

@pytest.mark.parametrize("prefetch", [None, 150])
def test_a_backlog_behind_a_slow_handler_is_not_expired_unseen(prefetch: int | None) -> None:
    seen: list[int] = []

    def handler(delivery: Delivery[int]) -> None:
        time.sleep(0.02)  # sleep-ok: simulates a slow handler
        seen.append(delivery.message)
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=2.0, balanced_capacity=1000)
        topic.create_group("g")
        for n in range(150):
            topic.publish(n)
        topic.subscribe(handler, group="g", prefetch=prefetch)
        assert topic.join(timeout=60)
        stats = topic.stats()

    assert sorted(seen) == list(range(150))
    assert (stats.delivered, stats.timed_out, stats.dead_lettered) == (150, 0, 0)


def _slow_worker(directory: str, seconds: float) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        time.sleep(seconds)  # sleep-ok: simulates a slow handler
        delivery.ack()
        append_line(directory, str(delivery.message))

    return handler


def test_a_backlog_behind_a_slow_worker_is_not_expired_unseen(tmp_path: Path) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.5)
        topic.create_group("g")
        for n in range(60):
            topic.publish(n)
        topic.subscribe(_slow_worker(str(tmp_path), 0.03), group="g", workers=1)
        assert topic.join(timeout=60)
        stats = topic.stats()

    assert sorted(int(n) for n in read_lines(tmp_path)) == list(range(60))
    assert (stats.delivered, stats.timed_out, stats.dead_lettered) == (60, 0, 0)


# -- 3. a worker's late ack is reported as late ------------------------------------------------------

def _late_acker(directory: str) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 0:
            time.sleep(0.8)  # sleep-ok: outlives the ack deadline on purpose
        try:
            delivery.ack()
        except SettlementError as exc:
            append_line(directory, f"{delivery.message} late {exc}")
        else:
            append_line(directory, f"{delivery.message} ok")

    return handler


def _one_slow_hand_over(handler: Any, directory: Path) -> tuple[list[str], list[Any], dict[str, str]]:
    """Messages 0-2 in one hand-over to one worker (ack timeout 0.5 s) whose handler runs
    long on message 0: the lines it wrote, the outcomes, the dead letters' reasons."""
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.5)
        topic.create_group("g")
        reports = [topic.publish(n) for n in range(3)]  # one hand-over: 0 runs long, 1-2 wait
        topic.subscribe(handler, group="g", workers=1, prefetch=3)
        assert topic.join(timeout=30)
        outcomes = [r.outcome.result(timeout=5) for r in reports]
        letters = {d.message_id: d.reason for d in topic.dead_letters}
    return read_lines(directory), outcomes, letters


def test_a_workers_ack_after_the_deadline_raises_and_the_rest_is_not_handled(tmp_path: Path) -> None:
    lines, outcomes, letters = _one_slow_hand_over(_late_acker(str(tmp_path)), tmp_path)

    assert len(lines) == 1 and lines[0].startswith("0 late") and "timed out" in lines[0]
    assert not any(o.acked for o in outcomes)
    assert letters == {"1": "timeout", "2": "timeout", "3": "timeout"}


def _slow_first(directory: str) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 0:
            time.sleep(0.8)  # sleep-ok: outlives the ack deadline on purpose
        append_line(directory, f"{delivery.message} handled")

    return handler


def test_a_worker_skips_what_the_deadline_took_while_an_earlier_handler_ran(tmp_path: Path) -> None:
    # No ack at all: the worker learns of the deadline only when it reaches message 1.
    lines, outcomes, letters = _one_slow_hand_over(_slow_first(str(tmp_path)), tmp_path)

    assert lines == ["0 handled"]  # 1 and 2 expired unseen: never handled
    assert not any(o.acked for o in outcomes)
    assert letters == {"1": "timeout", "2": "timeout", "3": "timeout"}


# -- 5. BaseException in a thread handler ----------------------------------------------------------

def test_sys_exit_and_keyboard_interrupt_in_a_thread_handler_are_isolated() -> None:
    handled: list[int] = []

    def handler(delivery: Delivery[int]) -> None:
        if delivery.message % 5 == 0:
            if delivery.message % 10 == 0:
                sys.exit(3)
            raise KeyboardInterrupt
        handled.append(delivery.message)
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=None)
        other = bus.create_topic("other")
        topic.subscribe(handler, group="g")
        reports = [topic.publish(n) for n in range(40)]
        assert topic.join(timeout=10)
        outcomes = [r.outcome.result(timeout=5) for r in reports]
        reasons = sorted({d.reason for d in topic.dead_letters})
        closed = (topic.closed, other.closed)
        stats = topic.stats()

    assert closed == (False, False)
    assert sorted(handled) == [n for n in range(40) if n % 5]
    assert [o.acked for o in outcomes] == [bool(n % 5) for n in range(40)]
    assert reasons == ["error"]
    assert (stats.pending, stats.dead_lettered, stats.nacked) == (0, 8, 8)


# -- 6. a handler publishing into its own full group -------------------------------------------------

def test_a_handler_publishing_into_its_own_full_group_gets_a_clear_error() -> None:
    errors: list[str] = []
    done = threading.Event()

    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=2, ack_timeout=None)

        def handler(delivery: Delivery[int]) -> None:
            if delivery.message == -1:
                try:
                    for n in range(10):
                        topic.publish(n)
                except WouldBlock as exc:
                    errors.append(str(exc))
                done.set()
            delivery.ack()

        topic.subscribe(handler, group="g", prefetch=1)
        topic.publish(-1)
        finished = done.wait(timeout=20)
        idle = topic.join(timeout=20)
        stats = topic.stats()

    assert finished and idle
    assert len(errors) == 1 and "'g'" in errors[0] and "its own" in errors[0]
    assert stats.pending == 0 and stats.delivered == stats.published
