"""held_by(): what a publish would wait for, named (issue 15 item 6)."""

from __future__ import annotations

import time

import pytest

from runtime import Bus, TopicSettings
from runtime.core._held import holder
from runtime.core.subscribers._gate import Gate, GroupHandle
from runtime.core.subscribers._ring import Ring
from runtime.errors import WouldBlock


def test_nothing_holds_an_idle_topic(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.subscribe(lambda d: d.ack(), group="g")

    assert topic.held_by() is None
    assert bus.held_by() == {}


def test_a_full_group_with_no_consumer_is_named(bus: Bus) -> None:
    topic = bus.create_topic("orders", balanced_capacity=4)
    topic.create_group("billing")
    for n in range(4):
        topic.publish(n, timeout=1)

    with pytest.raises(WouldBlock):
        topic.publish(4, timeout=0.1)

    text = "group 'billing' of topic 'orders' is full (4 messages waiting, balanced_capacity 4)"
    assert topic.held_by() == text
    assert bus.held_by() == {"orders": text}


def test_max_pending_is_named_first(bus: Bus) -> None:
    topic = bus.create_topic("t", max_pending=2, balanced_capacity=2)
    topic.create_group("g")
    topic.publish(0)
    topic.publish(1)

    assert topic.held_by() == "topic 't' has 2 pending messages (max_pending 2)"


def test_a_broadcast_subscriber_a_ring_behind_is_named(bus: Bus) -> None:
    topic = bus.create_topic("t", broadcast_capacity=2, ack_timeout=None)
    topic.subscription()
    reader = topic.subscription()
    topic.publish(0)
    assert topic.held_by() is None
    topic.publish(1)
    for _ in range(2):
        reader.receive(timeout=5).ack()

    held = topic.held_by()

    assert held == (
        "broadcast subscriber 1 of topic 't' is a whole ring (2 entries, broadcast_capacity) behind"
    )
    with pytest.raises(WouldBlock) as info:
        topic.publish(2, timeout=0.1)
    assert "broadcast subscriber 1 of topic 't'" in str(info.value)


def test_a_group_full_for_unkeyed_publishes_is_named_whatever_keyed_ones_may_take() -> None:
    # A worker group lends keyed publishes room its unkeyed limit does not have (the
    # least one member has free above what all lend): an unkeyed publish waits there.
    gate = Gate(4, name="workers")
    gate.lend(0, 4)
    assert gate.acquire(4, None, keyed=False)
    groups = [GroupHandle("workers", None, gate, None)]  # type: ignore[arg-type]

    text = holder("t", TopicSettings(), None, groups, Ring(8, "t"))  # type: ignore[arg-type]

    with pytest.raises(WouldBlock):  # an unkeyed publish would wait
        gate.acquire(1, time.monotonic() + 0.01, keyed=False)
    assert text == "group 'workers' of topic 't' is full (4 messages waiting, balanced_capacity 4)"
