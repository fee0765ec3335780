"""Subscriptions: ids, pull receive, unsubscribe mid-flight (issue 3 item 9)."""

from __future__ import annotations

import math
import threading

import pytest

from runtime import Bus, Delivery, Nack, PullSubscription, Subscription
from runtime.errors import TopicClosedError, WouldBlock


def test_subscriber_ids_start_at_one_and_are_never_reused(bus: Bus) -> None:
    topic = bus.create_topic("t")
    other = bus.create_topic("other")

    first = topic.subscribe(lambda d: d.ack())
    second = topic.subscribe(lambda d: d.ack(), group="g")
    first.unsubscribe()
    third = topic.subscription(group="g")
    fourth = topic.subscription()

    assert [first.id, second.id, third.id, fourth.id] == [1, 2, 3, 4]
    assert other.subscription().id == 1
    assert isinstance(second, Subscription) and isinstance(third, PullSubscription)
    assert (second.group, fourth.group) == ("g", None)


def test_receive_times_out_with_builtin_timeout_error(bus: Bus) -> None:
    topic = bus.create_topic("t")
    group_reader = topic.subscription(group="g")
    ring_reader = topic.subscription()

    with pytest.raises(TimeoutError):
        group_reader.receive(timeout=0.02)
    with pytest.raises(TimeoutError):
        ring_reader.receive(timeout=0.02)


def test_receive_nowait_raises_would_block_then_returns(bus: Bus) -> None:
    topic = bus.create_topic("t")
    ring_reader = topic.subscription()

    with pytest.raises(WouldBlock):
        ring_reader.receive_nowait()
    topic.publish("x")

    assert ring_reader.receive_nowait().message == "x"


def test_pull_subscription_is_iterable(bus: Bus) -> None:
    topic = bus.create_topic("t")
    reader = topic.subscription(group="g")
    for n in range(3):
        topic.publish(n)
    got = []

    for delivery in reader:
        got.append(delivery.message)
        delivery.ack()
        if len(got) == 3:
            break

    assert got == [0, 1, 2]


def test_unsubscribed_broadcast_subscriber_settles_unread_as_unsubscribed(bus: Bus) -> None:
    topic = bus.create_topic("t")
    reader = topic.subscription()
    reports = [topic.publish(n) for n in range(2)]

    reader.unsubscribe()
    reader.unsubscribe()

    for report in reports:
        assert report.outcome.result(timeout=5).nacks == (
            Nack(f"subscriber:{reader.id}", "unsubscribed"),
        )
    assert topic.stats().pending == 0
    with pytest.raises(TopicClosedError):
        reader.receive(timeout=1)


def test_unsubscribed_pull_member_returns_its_prefetch_to_the_group(bus: Bus) -> None:
    topic = bus.create_topic("t")
    leaving = topic.subscription(group="g")
    report = topic.publish(1)

    leaving.unsubscribe()
    staying = topic.subscription(group="g")
    delivery = staying.receive(timeout=5)
    delivery.ack()

    assert (delivery.message, delivery.attempt) == (1, 1)
    assert report.outcome.result(timeout=5).acked


def test_unsubscribing_mid_flight_leaves_nothing_pending(bus: Bus) -> None:
    topic = bus.create_topic("t")
    inside, release = threading.Event(), threading.Event()

    def handler(delivery: Delivery[int]) -> None:
        inside.set()
        release.wait(10)
        delivery.ack()

    sub = topic.subscribe(handler, group="g")
    reports = [topic.publish(n) for n in range(5)]
    inside.wait(5)
    threading.Timer(0.05, release.set).start()

    sub.unsubscribe()

    assert topic.join(timeout=10)
    assert all(r.outcome.result(timeout=5).acked for r in reports)


def test_unsubscribe_from_inside_the_handler_does_not_deadlock(bus: Bus) -> None:
    topic = bus.create_topic("t")
    subs: list[Subscription] = []
    done = threading.Event()

    def handler(delivery: Delivery[int]) -> None:
        subs[0].unsubscribe()
        delivery.ack()
        done.set()

    subs.append(topic.subscribe(handler, group="g"))
    topic.publish(1)

    assert done.wait(5)
    assert topic.join(timeout=5)


def test_broadcast_subscriber_removed_keeps_others_fed(bus: Bus) -> None:
    topic = bus.create_topic("t")
    gone = topic.subscribe(lambda d: d.ack())
    stays = topic.subscription()
    gone.unsubscribe()

    report = topic.publish("x")

    assert report.broadcast == 1
    stays.receive(timeout=5).ack()
    assert report.outcome.result(timeout=5).acked


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf])
def test_receive_refuses_a_timeout_that_is_not_finite(bus: Bus, timeout: float) -> None:
    topic = bus.create_topic("t")
    pull = topic.subscription(group="g")
    topic.publish("waiting")

    with pytest.raises(ValueError, match="timeout"):
        pull.receive(timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        pull.receive_many(10, timeout=timeout)

    assert pull.receive(timeout=5).message == "waiting"  # nothing was taken meanwhile
