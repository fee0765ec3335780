"""broadcast_on_lag="block" (the default): a slow subscriber holds publishers, loses nothing."""

from __future__ import annotations

import threading
import time

import pytest

from runtime import Bus, Delivery, TopicSettings
from runtime.errors import TopicClosedError, WouldBlock


def test_block_is_the_default_lag_policy() -> None:
    assert TopicSettings().broadcast_on_lag == "block"


def test_a_subscriber_a_ring_behind_holds_publishers_and_is_named(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=4, ack_timeout=None)
    reader = topic.subscription()  # reads only when told

    for n in range(4):
        topic.publish(n, timeout=1)
    with pytest.raises(WouldBlock) as info:
        topic.publish(4, timeout=0.2)

    assert f"subscriber {reader.id}" in str(info.value) and "'t'" in str(info.value)
    stats = topic.stats()
    assert (stats.published, stats.pending, stats.lagged, stats.dead_lettered) == (4, 4, 0, 0)
    reader.receive(timeout=5).ack()
    topic.publish(4, timeout=1)
    assert [reader.receive(timeout=5).message for _ in range(4)] == [1, 2, 3, 4]


def test_slow_push_subscriber_behind_a_publisher_loses_nothing(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=8)
    seen: list[bytes] = []

    def audit(delivery: Delivery[object]) -> None:
        end = time.perf_counter() + 50e-6
        while time.perf_counter() < end:
            pass
        seen.append(delivery.message.data)  # type: ignore[attr-defined]
        delivery.ack()

    topic.subscribe(audit)
    publisher = topic.publisher()
    futures = [publisher.publish(b"%d" % n) for n in range(3000)]
    publisher.flush(timeout=30)

    assert all(f.result(timeout=5) for f in futures)
    assert topic.join(timeout=30)
    assert seen == [b"%d" % n for n in range(3000)]
    stats = topic.stats()
    assert (stats.delivered, stats.lagged, stats.dead_lettered) == (3000, 0, 0)


def test_close_wakes_a_publisher_held_by_the_ring(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=2, ack_timeout=None)
    topic.subscription()  # never reads
    topic.publish(0)
    topic.publish(1)
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            topic.publish(2)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    thread.join(timeout=0.3)
    assert thread.is_alive()  # held by the ring
    topic.close()
    thread.join(timeout=5)

    assert not thread.is_alive()
    assert [type(e) for e in errors] == [TopicClosedError]
    assert [d.reason for d in topic.dead_letters] == ["closed", "closed"]


def test_unsubscribing_the_slow_subscriber_releases_publishers(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=2, ack_timeout=None)
    slow = topic.subscription()
    fast = topic.subscription()
    topic.publish(0)
    topic.publish(1)
    for _ in range(2):
        fast.receive(timeout=5).ack()

    slow.unsubscribe()
    topic.publish(2, timeout=1)

    assert fast.receive(timeout=5).message == 2
    assert [(d.message, d.reason) for d in topic.dead_letters] == [
        (0, "unsubscribed"), (1, "unsubscribed"),
    ]
