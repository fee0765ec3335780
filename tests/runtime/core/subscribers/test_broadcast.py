"""Broadcast subscribers: every message to each, the ring and its lag rule (item 6)."""

from __future__ import annotations

import threading

import pytest

from runtime import Bus, Delivery, Nack
from runtime.errors import UnsupportedPolicyError


def test_every_broadcast_subscriber_gets_every_message(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=256)
    seen: list[list[int]] = [[], [], []]
    for index in range(3):
        topic.subscribe(lambda d, i=index: (seen[i].append(d.message), d.ack()))

    for n in range(200):
        topic.publish(n)

    assert topic.join(timeout=10)
    assert seen == [list(range(200))] * 3
    assert topic.stats().delivered == 200


def test_lagging_subscriber_skips_overwritten_entries_as_lagged(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=4, broadcast_on_lag="drop_oldest")
    entered, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def slow(delivery: Delivery[int]) -> None:
        if delivery.message == 0:
            entered.set()
            release.wait(10)
        seen.append(delivery.message)
        delivery.ack()

    sub = topic.subscribe(slow)
    topic.publish(0)
    entered.wait(5)
    for n in range(1, 10):
        topic.publish(n)
    release.set()

    assert topic.join(timeout=10)
    assert seen == [0, 6, 7, 8, 9]
    letters = [(d.message, d.reason, d.subscriber_id) for d in topic.dead_letters]
    assert letters == [(n, "lagged", sub.id) for n in range(1, 6)]
    stats = topic.stats()
    assert (stats.lagged, stats.nacked, stats.dead_lettered, stats.delivered) == (5, 5, 5, 5)


def test_lag_of_one_subscriber_does_not_affect_another(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=2, broadcast_on_lag="drop_oldest")
    lagging = topic.subscription()
    keeping_up = topic.subscription()
    reports = []

    for n in range(5):
        reports.append(topic.publish(n))
        keeping_up.receive(timeout=5).ack()

    assert [lagging.receive(timeout=5).message for _ in range(2)] == [3, 4]
    for report in reports[:3]:
        assert report.outcome.result(timeout=5).nacks == (
            Nack(f"subscriber:{lagging.id}", "lagged"),
        )


def test_drop_oldest_publishing_never_blocks_on_broadcast(bus: Bus) -> None:
    topic = bus.create_topic(
        "t", broadcast_capacity=2, ack_timeout=None, broadcast_on_lag="drop_oldest",
    )
    topic.subscription()  # never reads

    reports = [topic.publish(n, timeout=0.5) for n in range(50)]

    assert all(r.broadcast == 1 for r in reports)
    stats = topic.stats()
    assert (stats.lagged, stats.pending) == (48, 2)


def test_disconnect_policy_is_rejected_at_creation(bus: Bus) -> None:
    with pytest.raises(UnsupportedPolicyError) as info:
        bus.create_topic("t", broadcast_on_lag="disconnect")

    assert "broadcast_on_lag" in str(info.value) and "disconnect" in str(info.value)
    assert bus.topics() == []


def test_broadcast_deliveries_have_no_group_and_never_redeliver(bus: Bus) -> None:
    topic = bus.create_topic("t", max_delivery_attempts=3)
    attempts: list[tuple[int, str | None]] = []
    topic.subscribe(lambda d: (attempts.append((d.attempt, d.group)), d.nack()))

    topic.publish(1).outcome.result(timeout=5)

    assert attempts == [(1, None)]
    assert topic.stats().redelivered == 0


def test_new_subscriber_starts_at_the_head(bus: Bus) -> None:
    topic = bus.create_topic("t")
    first = topic.subscription()
    topic.publish("old")
    second = topic.subscription()
    topic.publish("new")

    assert [first.receive(timeout=5).message for _ in range(2)] == ["old", "new"]
    assert second.receive(timeout=5).message == "new"
