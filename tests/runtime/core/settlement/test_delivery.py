"""Delivery: settle once, deadlines, handler errors, auto_ack (issue 3 item 4)."""

from __future__ import annotations

import threading

import pytest

from runtime import Bus, Delivery, Nack
from runtime.errors import SettlementError


def test_settling_twice_raises(bus: Bus) -> None:
    topic = bus.create_topic("t")
    reader = topic.subscription(group="g")
    topic.publish(1)
    delivery = reader.receive(timeout=5)

    delivery.ack()

    assert (delivery.state, delivery.acked, delivery.pending) == ("acked", True, False)
    with pytest.raises(SettlementError):
        delivery.ack()
    with pytest.raises(SettlementError):
        delivery.nack()
    assert delivery.state == "acked"


def test_nack_sets_state_and_keeps_reason_text(bus: Bus) -> None:
    topic = bus.create_topic("t")
    reader = topic.subscription(group="g")
    report = topic.publish(1)
    delivery = reader.receive(timeout=5)

    delivery.nack("bad payload")

    assert (delivery.state, delivery.nacked, delivery.timed_out) == ("nacked", True, False)
    assert report.outcome.result(timeout=5).nacks == (Nack("group:g", "nack", "bad payload"),)
    [letter] = topic.dead_letters
    assert (letter.reason, letter.error, letter.attempts) == ("nack", "bad payload", 1)
    with pytest.raises(SettlementError):
        delivery.nack()


def test_deadline_expiry_times_out_and_later_ack_raises(bus: Bus) -> None:
    topic = bus.create_topic("t", ack_timeout=0.05)
    reader = topic.subscription(group="g")
    report = topic.publish(1)
    delivery = reader.receive(timeout=5)

    outcome = report.outcome.result(timeout=5)

    assert outcome.nacks == (Nack("group:g", "timeout", None),)
    assert (delivery.state, delivery.timed_out) == ("nacked", True)
    with pytest.raises(SettlementError):
        delivery.ack()
    stats = topic.stats()
    assert (stats.timed_out, stats.nacked, stats.dead_lettered) == (1, 0, 1)
    assert [d.reason for d in topic.dead_letters] == ["timeout"]


def test_no_ack_timeout_means_no_deadline(bus: Bus) -> None:
    topic = bus.create_topic("t", ack_timeout=None)
    reader = topic.subscription(group="g")
    topic.publish(1)
    delivery = reader.receive(timeout=5)

    assert not topic.join(timeout=0.1)

    delivery.ack()
    assert topic.join(timeout=5)
    assert topic.stats().timed_out == 0


def test_ack_after_close_raises(bus: Bus) -> None:
    topic = bus.create_topic("t")
    reader = topic.subscription(group="g")
    topic.publish(1)
    delivery = reader.receive(timeout=5)

    topic.close()

    assert (delivery.state, delivery.timed_out) == ("nacked", False)
    with pytest.raises(SettlementError):
        delivery.ack()


def test_handler_exception_nacks_with_error_reason_and_text(bus: Bus) -> None:
    topic = bus.create_topic("t")

    def handler(delivery: Delivery[int]) -> None:
        raise ValueError(f"cannot handle {delivery.message}")

    topic.subscribe(handler, group="g")
    report = topic.publish(3)

    assert report.outcome.result(timeout=5).nacks == (
        Nack("group:g", "error", "cannot handle 3"),
    )
    [letter] = topic.dead_letters
    assert (letter.reason, letter.error) == ("error", "cannot handle 3")
    assert topic.stats().nacked == 1


def test_handler_exception_after_ack_changes_nothing(bus: Bus) -> None:
    topic = bus.create_topic("t")

    def handler(delivery: Delivery[int]) -> None:
        delivery.ack()
        raise RuntimeError("after the ack")

    topic.subscribe(handler, group="g")

    assert topic.publish(1).outcome.result(timeout=5).acked
    assert len(topic.dead_letters) == 0


def test_handler_exception_never_reaches_the_publisher(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.subscribe(lambda d: 1 / 0, group="g")

    report = topic.publish(1)

    assert report.outcome.result(timeout=5).nacks[0].reason == "error"
    assert topic.publish(2).outcome.result(timeout=5).nacks[0].reason == "error"


def test_auto_ack_acks_on_return_and_nacks_on_exception(bus: Bus) -> None:
    topic = bus.create_topic("t")

    def handler(delivery: Delivery[int]) -> None:
        if delivery.message < 0:
            raise ValueError("negative")

    topic.subscribe(handler, group="g", auto_ack=True)

    good, bad = topic.publish(1), topic.publish(-1)

    assert good.outcome.result(timeout=5).acked
    assert bad.outcome.result(timeout=5).nacks == (Nack("group:g", "error", "negative"),)


def test_handler_may_ack_from_another_thread_later(bus: Bus) -> None:
    topic = bus.create_topic("t")
    held: list[Delivery[int]] = []
    arrived = threading.Event()

    def handler(delivery: Delivery[int]) -> None:
        held.append(delivery)
        arrived.set()

    topic.subscribe(handler, group="g")
    report = topic.publish(1)
    arrived.wait(5)
    worker = threading.Thread(target=held[0].ack)
    worker.start()
    worker.join(5)

    assert report.outcome.result(timeout=5).acked
    assert held[0].acked


def test_concurrent_ack_and_deadline_settle_exactly_once() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.01)
        reader = topic.subscription(group="g")
        wins = 0
        for n in range(30):
            topic.publish(n)
            delivery = reader.receive(timeout=5)
            try:
                delivery.ack()
                wins += 1
            except Exception:
                assert delivery.timed_out

        assert topic.join(timeout=5)
        stats = topic.stats()
        assert stats.delivered == wins
        assert stats.delivered + stats.timed_out == 30
        assert stats.dead_lettered == 30 - wins
