"""The lease log over a real lease member: whole hand-overs, cut ones, spares, rejects."""

from __future__ import annotations

from typing import Any

from runtime import Bus, Message
from runtime.broker.lease._log import LeaseLog
from runtime.core.settlement._claims import fail_delivery


def _log(topic: Any, window: int) -> LeaseLog:
    return LeaseLog(subscribe=lambda: topic._lease_member("spark", window),
                    reject=fail_delivery, lease_seconds=60.0)


def _topic(bus: Bus, count: int, attempts: int = 1) -> Any:
    topic = bus.create_topic("t", ack_timeout=None, max_delivery_attempts=attempts)
    topic.create_group("spark")
    topic._publish_batch([Message(data=b"%03d" % i) for i in range(count)]).result(timeout=10)
    return topic


def test_acks_settle_whole_hand_overs_and_the_one_an_ack_cuts() -> None:
    with Bus() as bus:
        topic = _topic(bus, 100)
        log = _log(topic, window=16)

        end = log.latest(0, 40)
        columns, _ = log.fetch_bounded(0, end, None)
        log.ack(25)  # inside a hand-over of at most 16
        topic._sync()
        after_cut = topic.stats()
        log.ack(40)
        topic._sync()
        after_all = topic.stats()
        log.close()

    assert end == 40
    assert columns.payload == [b"%03d" % i for i in range(40)]
    assert columns.attempt == [1] * 40 and columns.attributes == [{}] * 40
    assert (after_cut.delivered, after_all.delivered, after_all.pending) == (25, 40, 60)


def test_what_a_hand_over_brings_past_the_batch_goes_back_at_its_attempt() -> None:
    # Of the five leased, three were read (attempt + 1); the two unread ones and the
    # spares of the hand-over go back at their attempt.
    with Bus() as bus:
        topic = _topic(bus, 50, attempts=2)
        log = _log(topic, window=16)

        end = log.latest(0, 5)  # the first hand-over holds more than five
        log.fetch(0, 3)
        released = log.close()
        reader = topic.subscription(group="spark", prefetch=64)
        deliveries: list[Any] = []
        while len(deliveries) < 50:
            deliveries += reader.receive_many(50 - len(deliveries), timeout=10)
        attempts = {d.message.data: d.attempt for d in deliveries}
        for delivery in deliveries:
            delivery.ack()
        topic._sync()
        stats = topic.stats()
        reader.unsubscribe()

    assert (end, released) == (5, 5)
    assert sorted(attempts) == [b"%03d" % i for i in range(50)]  # nothing lost, no copy
    assert sorted(k for k, a in attempts.items() if a == 2) == [b"%03d" % i for i in range(3)]
    assert sum(a == 1 for a in attempts.values()) == 47
    assert (stats.delivered, stats.pending, stats.dead_lettered, stats.redelivered) == (50, 0, 0, 3)


def test_leases_nobody_read_go_back_without_an_attempt() -> None:
    with Bus() as bus:
        topic = _topic(bus, 40)  # max_delivery_attempts=1: an attempt counted dead-letters
        log = _log(topic, window=16)

        end = log.latest(0, 40)
        log.fetch(10, 12)
        log.fetch(30, 31)
        log.ack_range(20, 22)
        released = log.close()
        topic._sync()
        letters = sorted(d.message.data for d in topic.dead_letters)
        reader = topic.subscription(group="spark", prefetch=64)
        deliveries: list[Any] = []
        while len(deliveries) < 35:
            deliveries += reader.receive_many(35 - len(deliveries), timeout=10)
        for delivery in deliveries:
            delivery.ack()
        topic._sync()
        stats = topic.stats()
        reader.unsubscribe()

    assert (end, released) == (40, 38)
    assert letters == [b"010", b"011", b"030"]
    assert sorted(d.message.data for d in deliveries) == [
        b"%03d" % i for i in range(40) if i not in (10, 11, 20, 21, 30)]
    assert {d.attempt for d in deliveries} == {1}
    assert (stats.delivered, stats.dead_lettered, stats.pending, stats.redelivered) == (37, 3, 0, 0)


def test_an_unencodable_message_of_a_hand_over_is_dead_lettered_alone() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=None)
        topic.create_group("spark")
        topic.publish(b"a")
        topic.publish({1, 2})  # neither bytes, str nor JSON
        topic.publish("c", attributes={"k": "v"})
        log = _log(topic, window=16)

        end = log.latest(0, 3)
        records = log.fetch(0, end)
        log.ack(end)
        topic._sync()
        stats = topic.stats()
        letters = list(bus.dead_letters("t"))

    assert end == 2
    assert [(r.payload, r.attributes) for r in records] == [(b"a", {}), (b"c", {"k": "v"})]
    assert [(d.reason, d.message) for d in letters] == [("error", {1, 2})]
    assert (stats.delivered, stats.dead_lettered, stats.pending) == (2, 1, 0)


def test_released_leases_are_nacked_in_bulk_and_dead_lettered_in_order() -> None:
    with Bus() as bus:
        topic = _topic(bus, 40)
        settled: list[int] = []
        settle = topic._ledger.settle

        def counted(deliveries: Any) -> None:
            settled.append(len(deliveries))
            settle(deliveries)

        topic._ledger.settle = counted
        log = _log(topic, window=16)
        end = log.latest(0, 40)  # three hand-overs of at most 16
        log.fetch(0, end)  # read: the release counts an attempt
        released = log.close()
        topic._sync()
        stats = topic.stats()
        letters = [(d.message.data, d.reason, d.error) for d in topic.dead_letters]

    assert (end, released) == (40, 40)
    assert settled == [40]  # one settlement message for all of them, not 40
    assert letters == [(b"%03d" % i, "nack", "lease expired") for i in range(40)]
    assert (stats.nacked, stats.dead_lettered, stats.pending) == (40, 40, 0)
