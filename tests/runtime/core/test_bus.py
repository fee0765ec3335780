"""Bus: topic lifecycle, lookup, stats and ownership of the actor system."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from support.reliability import wait_until

from actors import Actor, ActorSystem
from runtime import Bus, Topic
from runtime.errors import TopicClosedError, TopicExistsError, TopicNotFoundError


def test_create_lookup_and_list_topics() -> None:
    with Bus() as bus:
        orders = bus.create_topic("orders")
        bus.create_topic("audit")

        assert isinstance(orders, Topic)
        assert bus.topic("orders") is orders
        assert bus.topics() == ["orders", "audit"]
        assert orders.name == "orders"


def test_duplicate_and_unknown_names_raise() -> None:
    with Bus() as bus:
        bus.create_topic("orders")

        with pytest.raises(TopicExistsError):
            bus.create_topic("orders")
        with pytest.raises(TopicNotFoundError):
            bus.topic("nope")
        with pytest.raises(TopicNotFoundError):
            bus.remove_topic("nope")
        with pytest.raises(TopicNotFoundError):
            bus.publish("nope", 1)


def test_remove_topic_closes_it_and_frees_the_name() -> None:
    with Bus() as bus:
        old = bus.create_topic("orders")

        bus.remove_topic("orders")
        new = bus.create_topic("orders")

        assert old.closed
        assert not new.closed
        assert bus.topics() == ["orders"]


def test_bus_publish_and_stats_and_dead_letters_by_name() -> None:
    with Bus() as bus:
        topic = bus.create_topic("orders")
        topic.subscribe(lambda d: d.ack(), group="g")

        report = bus.publish("orders", "hello", key="k")
        report.outcome.result(timeout=5)

        assert bus.stats()["orders"].delivered == 1
        assert bus.dead_letters("orders") is topic.dead_letters


def test_close_is_idempotent_and_closes_every_topic() -> None:
    bus = Bus()
    first, second = bus.create_topic("a"), bus.create_topic("b")

    bus.close()
    bus.close()

    assert first.closed and second.closed
    with pytest.raises(TopicClosedError):
        first.publish(1)


def test_bus_given_a_system_does_not_shut_it_down() -> None:
    with ActorSystem("shared") as system:
        with Bus(system=system) as bus:
            bus.create_topic("t").subscribe(lambda d: d.ack(), group="g")
            bus.publish("t", 1).outcome.result(timeout=5)

        assert system.status() is not None
        probe = system.spawn(_Echo)
        assert probe.ask("ping").result(timeout=5) == "ping"


def test_two_buses_can_share_a_system_with_the_same_topic_names() -> None:
    with ActorSystem("shared") as system, Bus(system=system) as one, Bus(system=system) as two:
        one.create_topic("t")
        two.create_topic("t")

        assert one.topics() == two.topics() == ["t"]


def test_bus_actors_are_real_actors_in_the_system() -> None:
    with Bus() as bus:
        topic = bus.create_topic("orders")
        topic.subscribe(lambda d: d.ack(), group="billing")
        topic.subscribe(lambda d: d.ack())

        names = list(bus.system.status())

        assert any("orders/tracker" in n for n in names)
        assert any("orders/group:billing" in n for n in names)
        assert any("orders/subscriber:2" in n for n in names)
        assert any("orders/member:1" in n for n in names)



class _Echo(Actor):
    def on_receive(self, message: object) -> object:
        return message


def test_close_with_stuck_handlers_wakes_every_blocked_publisher_at_once_within_one_budget(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from runtime.core import _bus, _topic

    monkeypatch.setattr(_bus, "_CLOSE_BUDGET", 1.0, raising=False)
    monkeypatch.setattr(_topic, "_STOP_TIMEOUT", 1.0)
    release = threading.Event()
    bus = Bus()
    topics = [bus.create_topic(f"t{n}", balanced_capacity=1) for n in range(3)]
    for topic in topics:
        topic.subscribe(lambda delivery: release.wait(30), group="g", prefetch=1)
    woken = {topic.name: threading.Event() for topic in topics}

    def publish_until_closed(topic: Topic[bytes]) -> None:
        with contextlib.suppress(TopicClosedError):
            while True:
                topic.publish(b"x")
        woken[topic.name].set()

    publishers = [threading.Thread(target=publish_until_closed, args=(t,)) for t in topics]
    for thread in publishers:
        thread.start()
    wait_until(lambda: all(topic.held_by() is not None for topic in topics), 10.0)
    closer = threading.Thread(target=bus.close)
    try:
        with caplog.at_level("WARNING", logger="runtime"):
            started = time.monotonic()
            closer.start()
            released = [woken[topic.name].wait(3.0) for topic in topics]
            closer.join(30.0)
            took = time.monotonic() - started
    finally:
        release.set()
        for thread in [*publishers, closer]:
            thread.join(10.0)

    assert released == [True, True, True]  # before: one topic at a time, ~5 s each
    assert took < 4.0  # one budget of 1 s for the bus, not one per topic
    forced = [r.getMessage() for r in caplog.records if "force-nacked" in r.getMessage()]
    assert sorted(message.split()[1] for message in forced) == ["t0", "t1", "t2"]
    assert all(topic.stats().pending == 0 for topic in topics)
