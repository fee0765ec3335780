"""The Publisher against a real Bus: ids, deliveries, ordering through a balanced group."""

from __future__ import annotations

import copy
import pickle
import threading
from collections import defaultdict
from typing import Any

import pytest

from runtime import Bus, Delivery, Message
from runtime.errors import InvalidSettingsError, PublishError, TopicClosedError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl


class Collector:
    """A balanced-group handler that acks and records every delivery."""

    def __init__(self, expected: int) -> None:
        self.deliveries: list[Delivery[Any]] = []
        self.expected = expected
        self.lock = threading.Lock()
        self.complete = threading.Event()

    def __call__(self, delivery: Delivery[Any]) -> None:
        delivery.ack()
        with self.lock:
            self.deliveries.append(delivery)
            if len(self.deliveries) >= self.expected:
                self.complete.set()

    def wait(self) -> list[Delivery[Any]]:
        assert self.complete.wait(10.0), f"got {len(self.deliveries)} of {self.expected}"
        return list(self.deliveries)


def test_subscribers_receive_messages_with_the_ids_the_futures_resolve_to(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    collector = Collector(30)
    topic.subscribe(collector, group="billing")
    pub = topic.publisher(batching=BatchSettings(max_messages=7, max_latency=0.005))

    futures = [
        pub.publish(b"%d" % i, {"n": str(i)}, ordering_key="k" if i % 2 else None)
        for i in range(30)
    ]
    ids = [f.result(timeout=5.0) for f in futures]
    deliveries = collector.wait()
    pub.close(timeout=5.0)

    assert len(set(ids)) == 30
    by_id = {d.message_id: d for d in deliveries}
    assert sorted(by_id) == sorted(ids)
    for i, message_id in enumerate(ids):
        delivery = by_id[message_id]
        assert isinstance(delivery.message, Message)
        assert delivery.message.data == b"%d" % i
        assert delivery.attributes == {"n": str(i)}
        assert delivery.key == ("k" if i % 2 else None)


def test_balanced_group_sees_each_keys_messages_in_publish_order(bus: Bus) -> None:
    topic = bus.create_topic("ordered")
    collector = Collector(300)
    topic.subscribe(collector, group="workers")
    topic.subscribe(collector, group="workers")
    settings = BatchSettings(max_messages=5, max_latency=0.002)
    pub = topic.publisher(batching=settings, message_ordering=True)

    for i in range(300):
        pub.publish(b"%d" % i, ordering_key=f"user-{i % 6}")
    pub.flush(timeout=10.0)
    deliveries = collector.wait()
    pub.close(timeout=5.0)

    seen: dict[str | None, list[int]] = defaultdict(list)
    for delivery in deliveries:
        seen[delivery.key].append(int(delivery.message.data))
    assert sorted(str(key) for key in seen) == [f"user-{k}" for k in range(6)]
    for key, numbers in seen.items():
        assert numbers == sorted(numbers), key
        assert len(numbers) == 50


def test_closed_topic_fails_every_future_and_pauses_ordered_keys(bus: Bus) -> None:
    topic = bus.create_topic("closing")
    topic.create_group("idle")
    pub = topic.publisher(batching=BatchSettings(max_latency=60.0), message_ordering=True)
    futures = [pub.publish(b"x", ordering_key="A") for _ in range(3)]

    topic.close()
    pub.flush(timeout=5.0)

    for future in futures:
        assert isinstance(future.exception(timeout=0), TopicClosedError)
    assert pub.paused_keys() == ["A"]
    assert pub.outstanding == (0, 0)
    pub.close(timeout=5.0)
    with pytest.raises(PublishError, match="Publisher is closed"):
        pub.publish(b"late")


def test_flow_control_bounds_what_a_slow_subscriber_lets_pile_up(bus: Bus) -> None:
    topic = bus.create_topic("slow", balanced_capacity=8)
    release = threading.Event()
    handled: list[bytes] = []

    def slow(delivery: Delivery[Any]) -> None:
        release.wait(10.0)
        handled.append(delivery.message.data)
        delivery.ack()

    topic.subscribe(slow, group="slow")
    flow = FlowControl(max_outstanding_bytes=64 * 100)
    pub = topic.publisher(batching=BatchSettings(max_messages=10, max_latency=0.001),
                          flow_control=flow)
    peak = 0
    publisher_done = threading.Event()

    def publish_all() -> None:
        # More than the group queue (8) and the member's window hold: the topic stalls.
        for _ in range(600):
            pub.publish(b"p" * 100)
        publisher_done.set()

    thread = threading.Thread(target=publish_all)
    thread.start()
    while not publisher_done.wait(0.005):
        peak = max(peak, pub.outstanding[1])
        if not release.is_set() and pub._gate.congested:
            release.set()  # the publisher hit the limit: let the subscriber drain
    thread.join(timeout=10.0)
    pub.flush(timeout=10.0)
    joined = topic.join(timeout=10.0)
    assert joined, (len(handled), pub.outstanding, topic.stats(), release.is_set())
    pub.close(timeout=5.0)

    assert peak <= 64 * 100
    assert len(handled) == 600


def test_publisher_on_a_topic_that_takes_no_message_is_refused_naming_message_type(
    bus: Bus,
) -> None:
    class Order:
        pass

    orders = bus.create_topic("orders", message_type=Order)

    with pytest.raises(InvalidSettingsError) as info:
        orders.publisher()

    assert info.value.setting == "message_type"
    assert "Order" in str(info.value) and "orders" in str(info.value)


@pytest.mark.parametrize("message_type", [Message, bytes, object])
def test_publisher_on_a_topic_that_takes_messages_or_their_bytes_works(
    bus: Bus, message_type: type,
) -> None:
    topic = bus.create_topic("t", message_type=message_type)
    reader = topic.subscription(group="g")

    with topic.publisher() as publisher:
        message_id = publisher.publish(b"x").result(timeout=5)

    assert reader.receive(timeout=5).message_id == message_id


def test_messages_published_without_attributes_share_one_read_only_empty_dict(bus: Bus) -> None:
    topic = bus.create_topic("bare")
    collector = Collector(3)
    topic.subscribe(collector, group="readers")
    pub = topic.publisher()

    pub.publish(b"a")
    pub.publish(b"b", {"n": "1"})
    pub.publish(b"c", {})
    pub.flush(timeout=5.0)
    deliveries = sorted(collector.wait(), key=lambda d: d.message.data)
    pub.close(timeout=5.0)

    bare, tagged, empty = (d.attributes for d in deliveries)
    assert (bare, tagged, empty) == ({}, {"n": "1"}, {})
    assert bare is empty  # one shared dict, not one per message
    for mutate in (lambda: bare.__setitem__("x", "1"), lambda: bare.update(x="1"), bare.clear):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    assert type(pickle.loads(pickle.dumps(bare))) is dict
    assert type(copy.copy(bare)) is dict
    tagged["m"] = "2"  # given attributes stay the message's own dict
    assert deliveries[0].attributes == {} and deliveries[2].attributes == {}


def test_a_message_without_attributes_leaves_the_process_with_a_plain_dict(bus: Bus) -> None:
    topic = bus.create_topic("outbound")
    refused = threading.Event()

    def refuse(delivery: Delivery[Message]) -> None:
        delivery.nack("no")
        refused.set()

    topic.subscribe(refuse, group="readers")
    pub = topic.publisher()

    pub.publish(b"a").result(timeout=5.0)
    assert refused.wait(5.0) and topic.join(timeout=5.0)
    pub.close(timeout=5.0)
    [letter] = topic.dead_letters.drain()

    assert type(letter.attributes) is dict and letter.attributes == {}
    assert type(letter.message.attributes) is not dict  # read-only in the process...
    pickled = pickle.dumps(letter)
    assert b"builtins" not in pickled  # ...a plain {} outside: no global a peer must allow
    assert type(pickle.loads(pickled).message.attributes) is dict
