"""replay(): each letter goes back only to the destination that failed it (issue 15 item 1)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from runtime import Bus, Delivery


def test_replay_does_not_bill_twice_what_only_the_audit_failed(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    billed: Counter[str] = Counter()
    audited: list[tuple[int, str, int]] = []
    lock = threading.Lock()

    def bill(delivery: Delivery[int]) -> None:
        with lock:
            billed[delivery.message_id] += 1
        delivery.ack()

    def audit(delivery: Delivery[int]) -> None:
        audited.append((delivery.message, delivery.message_id, delivery.attempt))
        if delivery.message % 10 == 0 and delivery.attempt == 1:
            delivery.nack("audit failed")
        else:
            delivery.ack()

    topic.subscribe(bill, group="billing")
    audit_sub = topic.subscribe(audit)
    ids = {topic.publish(n).message_id: n for n in range(100)}
    assert topic.join(timeout=10)
    failed = {d.message_id: d.message for d in topic.dead_letters}
    assert sorted(failed.values()) == list(range(0, 100, 10))

    assert topic.dead_letters.replay() == 10

    assert topic.join(timeout=10)
    assert billed == Counter(dict.fromkeys(ids, 1))
    replayed = audited[100:]
    assert replayed == [(n, message_id, 2) for message_id, n in failed.items()]
    assert len(topic.dead_letters) == 0
    stats = topic.stats()
    assert (stats.published, stats.pending, stats.dead_lettered) == (100, 0, 10)
    assert audit_sub.active


def test_a_failed_group_gets_its_letters_back_as_new_attempts_of_the_same_ids(bus: Bus) -> None:
    topic = bus.create_topic("t")
    seen_by_group: list[tuple[str, int]] = []
    seen_by_audit: list[str] = []
    topic.subscribe(
        lambda d: (seen_by_group.append((d.message_id, d.attempt)),
                   d.ack() if d.attempt > 1 else d.nack()),
        group="g",
    )
    topic.subscribe(lambda d: (seen_by_audit.append(d.message_id), d.ack()))
    ids = [topic.publish(n).message_id for n in range(5)]
    assert topic.join(timeout=10)

    assert topic.dead_letters.replay() == 5

    assert topic.join(timeout=10)
    assert seen_by_group == [(i, 1) for i in ids] + [(i, 2) for i in ids]
    assert seen_by_audit == ids
    assert topic.stats().delivered == 5


def test_a_letter_whose_destination_is_gone_is_dead_lettered_again_as_unsubscribed(
    bus: Bus,
) -> None:
    topic = bus.create_topic("t")
    subscriber = topic.subscribe(lambda d: d.nack())
    topic.subscribe(lambda d: d.nack(), group="g")
    topic.publish("m").outcome.result(timeout=5)
    subscriber.unsubscribe()
    topic.delete_group("g")

    assert topic.dead_letters.replay() == 2

    assert topic.join(timeout=5)
    letters = {(d.message, d.reason, d.group, d.attempts) for d in topic.dead_letters}
    assert letters == {("m", "unsubscribed", "g", 1), ("m", "unsubscribed", None, 1)}
    broadcast = [d for d in topic.dead_letters if d.group is None]
    assert [d.subscriber_id for d in broadcast] == [subscriber.id]
    assert topic.stats().pending == 0


def test_letters_no_destination_took_are_published_anew(bus: Bus) -> None:
    topic = bus.create_topic("t")
    old_ids = [topic.publish(n).message_id for n in range(3)]
    reader = topic.subscription(group="g")
    audit = topic.subscription()

    assert topic.dead_letters.replay() == 3

    got = [reader.receive(timeout=5) for _ in range(3)]
    assert [d.message for d in got] == [0, 1, 2]
    assert [audit.receive(timeout=5).message for _ in range(3)] == [0, 1, 2]
    assert not set(old_ids) & {d.message_id for d in got}


def test_a_pull_broadcast_subscriber_receives_its_replayed_letter(bus: Bus) -> None:
    topic = bus.create_topic("t", ack_timeout=None)
    reader = topic.subscription()
    others: list[Any] = []
    topic.subscribe(lambda d: (others.append(d.message), d.ack()), group="g")
    report = topic.publish("x")
    reader.receive(timeout=5).nack("later")
    message_id = report.message_id
    assert not report.outcome.result(timeout=5).acked

    assert topic.dead_letters.replay() == 1

    delivery = reader.receive(timeout=5)
    assert (delivery.message, delivery.message_id, delivery.attempt) == ("x", message_id, 2)
    delivery.ack()
    assert topic.join(timeout=5)
    assert others == ["x"]


def test_replayed_publisher_messages_keep_their_id_data_and_key(bus: Bus) -> None:
    topic = bus.create_topic("t")
    reader = topic.subscription(group="g")
    publisher = topic.publisher()
    message_id = publisher.publish(b"data", ordering_key="k", attributes={"a": "1"}).result(5)
    reader.receive(timeout=5).nack()
    topic._sync()

    topic.dead_letters.replay()

    delivery = reader.receive(timeout=5)
    assert (delivery.message.data, delivery.message.message_id, delivery.key) == (
        b"data", message_id, "k",
    )
    assert (delivery.message_id, delivery.attributes, delivery.attempt) == (
        message_id, {"a": "1"}, 2,
    )


def test_replay_to_another_topic_reaches_all_of_its_destinations(bus: Bus) -> None:
    source = bus.create_topic("source")
    source.subscribe(lambda d: d.nack(), group="g")
    source.publish("a").outcome.result(timeout=5)
    target = bus.create_topic("target")
    group = target.subscription(group="g2")
    audit = target.subscription()

    assert source.dead_letters.replay(topic="target") == 1

    assert group.receive(timeout=5).message == "a"
    assert audit.receive(timeout=5).message == "a"


def test_a_message_replayed_to_two_groups_counts_once_in_stats(bus: Bus) -> None:
    topic = bus.create_topic("t", max_delivery_attempts=1)
    topic.subscribe(lambda d: d.ack() if d.attempt > 1 else d.nack(), group="a")
    topic.subscribe(lambda d: d.ack() if d.attempt > 1 else d.nack(), group="b")
    ids = [topic.publish(n).message_id for n in range(3)]
    assert topic.join(timeout=10)
    assert sorted(d.message_id for d in topic.dead_letters) == sorted(ids * 2)

    assert topic.dead_letters.replay() == 6

    assert topic.join(timeout=10)
    stats = topic.stats()
    assert (stats.published, stats.delivered, stats.pending) == (3, 3, 0)
    assert (stats.nacked, stats.dead_lettered) == (6, 6)
    assert len(topic.dead_letters) == 0
