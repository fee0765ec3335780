"""A batch's deadline: the topic's wait for room ends there, the prefix is published and the
rest leaves nothing behind; a batch without one waits as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from runtime import Bus, Message
from runtime.errors import WouldBlock


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        yield bus


def _parts(prefix: bytes, count: int) -> tuple[list[bytes], list[dict[str, str]], list[str | None]]:
    return [prefix + b"%02d" % n for n in range(count)], [{} for _ in range(count)], [None] * count


def _drain_to_marker(topic: Any, subscription: Any) -> list[bytes]:
    """Ack what the group holds, then publish a marker through the topic's mailbox (after
    any batch sent before it) and ack up to it: every message published before it."""
    marker = topic._publish_batch([Message(data=b"marker")])
    seen: list[bytes] = []
    while True:
        delivery = subscription.receive(timeout=10)
        delivery.ack()
        if delivery.message.data == b"marker":
            break
        seen.append(delivery.message.data)
    marker.result(timeout=10)
    return seen


@pytest.mark.parametrize("throttle", [0.0, 0.5])
def test_a_batch_whose_deadline_passes_on_max_pending_publishes_its_prefix(
    bus: Bus, throttle: float,
) -> None:
    topic = bus.create_topic("t", max_pending=10, throttle=throttle, ack_timeout=None)
    subscription = topic.subscription(group="g")
    started = time.monotonic()

    ((ids, error),) = topic._publish_batches([_parts(b"m", 30)], deadline=started + 0.3).result(10)

    waited = time.monotonic() - started
    stats = topic.stats()
    assert list(ids or []) == [str(n) for n in range(1, 11)]  # the first 10: max_pending
    assert isinstance(error, WouldBlock) and "10 pending" in str(error)
    assert 0.3 <= waited < 5.0
    assert (stats.published, stats.pending) == (10, 10)  # the other 20: not counted, no slot
    with pytest.raises(WouldBlock):
        topic.publish(b"one more", timeout=0)  # every slot is the prefix's, none held over

    seen = _drain_to_marker(topic, subscription)

    assert seen == [b"m%02d" % n for n in range(10)]  # the refused 20 never arrive
    assert topic.join(timeout=10)
    assert topic.stats().published == 11


def test_a_batch_whose_deadline_passes_on_a_full_group_publishes_its_prefix(bus: Bus) -> None:
    topic = bus.create_topic("t", balanced_capacity=4, balanced_on_full="block", ack_timeout=None)
    topic.create_group("g")  # no member yet: the group's queue fills after 4

    ((ids, error),) = topic._publish_batches(
        [_parts(b"m", 10)], deadline=time.monotonic() + 0.3).result(10)

    assert list(ids or []) == ["1", "2", "3", "4"]
    assert isinstance(error, WouldBlock) and "'g' is full" in str(error)
    assert (topic.stats().published, topic.stats().pending) == (4, 4)
    seen = _drain_to_marker(topic, topic.subscription(group="g"))
    assert seen == [b"m00", b"m01", b"m02", b"m03"]


def test_a_batch_past_its_deadline_before_any_room_publishes_nothing(bus: Bus) -> None:
    topic = bus.create_topic("t", max_pending=2, ack_timeout=None)
    subscription = topic.subscription(group="g")
    topic._publish_batch([Message(data=b"a"), Message(data=b"b")]).result(10)

    ((ids, error),) = topic._publish_batches(
        [_parts(b"m", 5)], deadline=time.monotonic() + 0.2).result(10)

    assert ids is None and isinstance(error, WouldBlock)
    assert (topic.stats().published, topic.stats().pending) == (2, 2)
    assert _drain_to_marker(topic, subscription) == [b"a", b"b"]


def test_a_batch_without_a_deadline_waits_for_room_as_before(bus: Bus) -> None:
    topic = bus.create_topic("t", max_pending=2, ack_timeout=None)
    subscription = topic.subscription(group="g")

    outcomes = topic._publish_batches([_parts(b"m", 5)])
    received = []
    for _ in range(5):  # each ack frees the slot the waiting batch takes next
        delivery = subscription.receive(timeout=10)
        assert not outcomes.done()  # still waiting: no bound
        received.append(delivery.message.data)
        delivery.ack()
        if len(received) == 3:
            break
    for _ in range(2):
        delivery = subscription.receive(timeout=10)
        received.append(delivery.message.data)
        delivery.ack()

    ((ids, error),) = outcomes.result(10)
    assert error is None and list(ids or []) == ["1", "2", "3", "4", "5"]
    assert received == [b"m%02d" % n for n in range(5)]


def test_a_batch_cancelled_before_the_topic_starts_on_it_is_never_published(bus: Bus) -> None:
    topic = bus.create_topic("t", max_pending=1, ack_timeout=None)
    subscription = topic.subscription(group="g")
    first = topic._publish_batches([_parts(b"a", 2)])  # the actor waits in it for a slot
    delivery = subscription.receive(timeout=10)
    second = topic._publish_batches([_parts(b"b", 2)], deadline=time.monotonic() + 60)

    assert second.cancel()  # still in the mailbox behind the first

    delivery.ack()
    assert first.result(10)[0][1] is None
    assert _drain_to_marker(topic, subscription) == [b"a01"]
    assert topic.stats().published == 3  # a00, a01 and the marker
