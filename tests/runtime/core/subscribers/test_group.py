"""Balanced groups: competing members, full-group policies, redelivery, key order (item 5)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from runtime import Bus, Delivery, Nack, Topic
from runtime.errors import WouldBlock


def _recorder(seen: list[tuple[int, int]], member: int) -> object:
    def handler(delivery: Delivery[int]) -> None:
        seen.append((member, delivery.message))
        delivery.ack()

    return handler


def test_members_of_one_group_compete(bus: Bus) -> None:
    topic = bus.create_topic("t")
    seen: list[tuple[int, int]] = []
    for member in range(3):
        topic.subscribe(_recorder(seen, member), group="g")

    for n in range(300):
        topic.publish(n)

    assert topic.join(timeout=10)
    assert sorted(message for _, message in seen) == list(range(300))
    assert topic.stats().delivered == 300


def test_two_groups_each_get_every_message(bus: Bus) -> None:
    topic = bus.create_topic("t")
    billing: list[tuple[int, int]] = []
    shipping: list[tuple[int, int]] = []
    topic.subscribe(_recorder(billing, 0), group="billing")
    topic.subscribe(_recorder(shipping, 0), group="shipping")

    for n in range(100):
        topic.publish(n)

    assert topic.join(timeout=10)
    assert [m for _, m in billing] == list(range(100))
    assert [m for _, m in shipping] == list(range(100))
    assert topic.stats().delivered == 100


def test_group_without_members_holds_messages(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.create_group("later")
    for n in range(5):
        topic.publish(n)

    assert topic.groups() == ["later"]
    assert topic.stats().pending == 5
    reader = topic.subscription(group="later")
    got = []
    for _ in range(5):
        delivery = reader.receive(timeout=5)
        got.append(delivery.message)
        delivery.ack()

    assert got == [0, 1, 2, 3, 4]
    assert topic.join(timeout=5)


def test_full_group_with_block_makes_the_publisher_wait(bus: Bus) -> None:
    topic = bus.create_topic("t", balanced_capacity=2, ack_timeout=None)
    topic.create_group("g")
    topic.publish(1)
    topic.publish(2)

    with pytest.raises(WouldBlock):
        topic.publish(3, timeout=0.05)
    waiting = threading.Event()

    def publish_third() -> dict[str, str]:
        waiting.set()
        return topic.publish(3, timeout=10).balanced

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(publish_third)
        waiting.wait(5)
        reader = topic.subscription(group="g")
        first = reader.receive(timeout=5)
        assert future.result(timeout=10) == {"g": "enqueued"}

    first.ack()
    assert [reader.receive(timeout=5).message for _ in range(2)] == [2, 3]
    assert topic.stats().dropped == 0


def test_drop_newest_drops_for_that_group_only(bus: Bus) -> None:
    topic = bus.create_topic("t", balanced_capacity=1, balanced_on_full="drop_newest")
    topic.create_group("slow")
    fast = topic.subscription(group="fast")
    topic.publish(1)
    first = fast.receive(timeout=5)  # handed over: the fast group's queue is empty again

    report = topic.publish(2)

    assert report.balanced == {"slow": "dropped", "fast": "enqueued"}
    first.ack()
    second = fast.receive(timeout=5)
    second.ack()
    assert (first.message, second.message) == (1, 2)
    assert report.outcome.result(timeout=5).nacks == (Nack("group:slow", "dropped"),)
    letters = [(d.message, d.group, d.reason, d.subscriber_id) for d in topic.dead_letters]
    assert letters == [(2, "slow", "dropped", -1)]
    stats = topic.stats()
    assert (stats.dropped, stats.dead_lettered, stats.nacked) == (1, 1, 1)


def test_no_implicit_requeue_on_nack(bus: Bus) -> None:
    topic = bus.create_topic("t")
    attempts: list[int] = []

    def handler(delivery: Delivery[int]) -> None:
        attempts.append(delivery.attempt)
        delivery.nack()

    topic.subscribe(handler, group="g")
    topic.publish(1).outcome.result(timeout=5)

    assert attempts == [1]
    assert topic.stats().redelivered == 0
    assert [d.attempts for d in topic.dead_letters] == [1]


def test_redelivery_up_to_max_attempts_then_dead_letter(bus: Bus) -> None:
    topic = bus.create_topic("t", max_delivery_attempts=3)
    attempts: list[int] = []

    def handler(delivery: Delivery[int]) -> None:
        attempts.append(delivery.attempt)
        delivery.nack("still broken")

    topic.subscribe(handler, group="g")
    report = topic.publish(1)

    assert report.outcome.result(timeout=5).nacks == (Nack("group:g", "nack", "still broken"),)
    assert attempts == [1, 2, 3]
    [letter] = topic.dead_letters
    assert (letter.attempts, letter.reason) == (3, "nack")
    stats = topic.stats()
    assert (stats.redelivered, stats.nacked, stats.dead_lettered) == (2, 3, 1)


def test_timed_out_delivery_is_redelivered_and_can_then_ack(bus: Bus) -> None:
    topic = bus.create_topic("t", max_delivery_attempts=3, ack_timeout=0.05)
    reader = topic.subscription(group="g")
    report = topic.publish(1)

    first = reader.receive(timeout=5)
    second = reader.receive(timeout=5)
    second.ack()

    assert first.timed_out and first.attempt == 1
    assert second.attempt == 2
    assert report.outcome.result(timeout=5).acked
    stats = topic.stats()
    assert (stats.timed_out, stats.redelivered, stats.delivered, stats.dead_lettered) == (
        1, 1, 1, 0,
    )


def test_timeouts_exhaust_attempts_into_dead_letters(bus: Bus) -> None:
    topic = bus.create_topic("t", max_delivery_attempts=3, ack_timeout=0.02)
    reader = topic.subscription(group="g")
    report = topic.publish(1)

    attempts = [reader.receive(timeout=5).attempt for _ in range(3)]

    assert attempts == [1, 2, 3]
    assert report.outcome.result(timeout=5).nacks == (Nack("group:g", "timeout"),)
    assert topic.stats().timed_out == 3
    assert [(d.reason, d.attempts) for d in topic.dead_letters] == [("timeout", 3)]


def join_recording_members(
    topic: Topic[Any], count: int, read: Callable[[Any], int], prefetch: int | None = None,
) -> tuple[dict[str, list[int]], dict[str, set[int]]]:
    """``count`` members of group ``g`` that ack and record, per key, what they read (in
    arrival order) and which members read it."""
    seen: dict[str, list[int]] = defaultdict(list)
    members: dict[str, set[int]] = defaultdict(set)
    lock = threading.Lock()

    def make(member: int) -> Callable[[Delivery[Any]], None]:
        def handler(delivery: Delivery[Any]) -> None:
            with lock:
                seen[delivery.key or ""].append(read(delivery.message))
                members[delivery.key or ""].add(member)
            delivery.ack()

        return handler

    for member in range(count):
        topic.subscribe(make(member), group="g", prefetch=prefetch)
    return seen, members


def test_keyed_messages_keep_per_key_order_within_a_group(bus: Bus) -> None:
    topic = bus.create_topic("t")
    seen, members = join_recording_members(topic, 3, int)
    for n in range(600):
        topic.publish(n, key=f"k{n % 7}")

    assert topic.join(timeout=10)
    for key in range(7):
        assert seen[f"k{key}"] == list(range(key, 600, 7))
        assert len(members[f"k{key}"]) == 1


@pytest.mark.parametrize("ordering", [True, False], ids=["one-key-batches", "mixed-batches"])
def test_publisher_batches_keep_per_key_order_over_several_members(
    bus: Bus, ordering: bool,
) -> None:
    topic = bus.create_topic("t")
    seen, members = join_recording_members(topic, 3, lambda message: int(message.data), prefetch=5)
    publisher = topic.publisher(message_ordering=ordering)
    for n in range(2000):
        publisher.publish(b"%d" % n, ordering_key=f"k{n % 7}" if n % 8 else None)
    publisher.close(timeout=10)

    assert topic.join(timeout=10)
    assert sum(map(len, seen.values())) == 2000
    for key in range(7):
        expected = [n for n in range(key, 2000, 7) if n % 8]
        assert seen[f"k{key}"] == expected
        assert len(members[f"k{key}"]) == 1
    assert sorted(seen[""]) == list(range(0, 2000, 8))  # unkeyed: any member, any order


def test_delete_group_dead_letters_what_waits_in_it(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.create_group("g")
    report = topic.publish(1)

    topic.delete_group("g")

    assert topic.groups() == []
    assert report.outcome.result(timeout=5).nacks == (Nack("group:g", "unsubscribed"),)
    assert topic.stats().pending == 0
