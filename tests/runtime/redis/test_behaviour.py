"""Behaviour cases run on both backends: what a user sees must not depend on where the
messages live."""

from __future__ import annotations

import threading
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pytest

from runtime import Bus, Message, Nack, Outcome


def test_acked_message_resolves_its_outcome_and_counts_delivered(any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    seen: list[Any] = []
    topic.subscribe(lambda d: (seen.append((d.message, d.key, d.attempt)), d.ack()), group="g")

    report = topic.publish({"order": 7}, key="customer-7")

    assert report.outcome.result(timeout=10).acked is True
    assert report.balanced == {"g": "enqueued"}
    assert topic.join(timeout=10) is True
    assert seen == [({"order": 7}, "customer-7", 1)]
    stats = topic.stats()
    assert (stats.published, stats.delivered, stats.pending) == (1, 1, 0)


def test_nack_moves_message_to_dead_letters_with_its_text(any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    topic.subscribe(lambda d: d.nack("out of stock"), group="billing")

    report = topic.publish("order-1")

    outcome = report.outcome.result(timeout=10)
    assert outcome.nacks == (Nack("group:billing", "nack", "out of stock"),)
    assert topic.join(timeout=10) is True
    [letter] = list(topic.dead_letters)
    assert (letter.message, letter.message_id, letter.group, letter.reason, letter.error,
            letter.attempts) == ("order-1", report.message_id, "billing", "nack",
                                 "out of stock", 1)
    stats = topic.stats()
    assert (stats.nacked, stats.dead_lettered, stats.delivered, stats.pending) == (1, 1, 0, 0)


def test_handler_error_is_dead_lettered_with_exception_and_traceback(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)

    def fail(delivery: Any) -> None:
        raise ValueError("bad order")

    topic.subscribe(fail, group="g")

    outcome = topic.publish("x").outcome.result(timeout=10)

    assert outcome.nacks == (Nack("group:g", "error", "bad order"),)
    assert topic.join(timeout=10) is True
    [letter] = topic.dead_letters.drain()
    assert (letter.reason, letter.error, letter.exception) == ("error", "bad order", "ValueError")
    assert letter.traceback is not None and "bad order" in letter.traceback
    assert len(topic.dead_letters) == 0


def test_nacked_message_is_redelivered_until_attempts_run_out(any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name, max_delivery_attempts=3)
    attempts: list[int] = []

    def handler(delivery: Any) -> None:
        attempts.append(delivery.attempt)
        if delivery.attempt < 3:
            delivery.nack()
        else:
            delivery.ack()

    topic.subscribe(handler, group="g")

    outcome = topic.publish("retry me").outcome.result(timeout=10)

    assert outcome.acked is True
    assert attempts == [1, 2, 3]
    assert topic.join(timeout=10) is True
    stats = topic.stats()
    assert (stats.nacked, stats.redelivered, stats.delivered, stats.dead_lettered) == (2, 2, 1, 0)


def test_message_without_subscribers_is_dead_lettered_no_subscribers(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)

    report = topic.publish("nobody")

    assert report.outcome.result(timeout=10).nacks == (Nack("none", "no_subscribers"),)
    [letter] = list(topic.dead_letters)
    assert (letter.reason, letter.subscriber_id, letter.message) == ("no_subscribers", -1, "nobody")
    assert topic.stats().dead_lettered == 1


def test_created_group_keeps_messages_until_a_member_pulls_them(any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    topic.create_group("later")
    reports = [topic.publish(i) for i in range(5)]

    pull = topic.subscription(group="later")
    received = [pull.receive(timeout=10) for _ in range(5)]
    for delivery in received:
        delivery.ack()

    assert [d.message for d in received] == [0, 1, 2, 3, 4]
    assert [d.message_id for d in received] == [r.message_id for r in reports]
    assert topic.groups() == ["later"]
    assert topic.join(timeout=10) is True
    assert all(r.outcome.result(timeout=10).acked for r in reports)


def test_every_group_settles_once_and_a_nack_of_one_is_the_outcome(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    topic.subscribe(lambda d: d.ack(), group="shipping")
    topic.subscribe(lambda d: d.nack(), group="billing")

    outcome = topic.publish("both").outcome.result(timeout=10)

    assert outcome.nacks == (Nack("group:billing", "nack", None),)
    assert topic.join(timeout=10) is True
    assert (topic.stats().delivered, topic.stats().dead_lettered) == (0, 1)


def test_replay_sends_a_letter_back_to_the_failed_group_only(any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    shipped: list[Any] = []
    billed: list[Any] = []
    fail_once = threading.Event()
    topic.subscribe(lambda d: (shipped.append(d.message), d.ack()), group="shipping")

    def bill(delivery: Any) -> None:
        billed.append(delivery.message)
        if fail_once.is_set():
            delivery.ack()
        else:
            delivery.nack()

    topic.subscribe(bill, group="billing")
    report = topic.publish(Message(data=b"abc", attributes={"k": "v"}))
    report.outcome.result(timeout=10)
    fail_once.set()

    replayed = topic.dead_letters.replay()

    assert replayed == 1
    assert topic.join(timeout=10) is True
    assert [m.data for m in shipped] == [b"abc"]
    assert [m.data for m in billed] == [b"abc", b"abc"]
    assert billed[1].message_id == report.message_id
    assert len(topic.dead_letters) == 0


def test_publisher_batches_reach_a_group_with_their_ids(any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    seen: list[Message] = []
    done = threading.Event()

    def handler(delivery: Any) -> None:
        seen.append(delivery.message)
        delivery.ack()
        if len(seen) == 250:
            done.set()

    topic.subscribe(handler, group="g")
    publisher = topic.publisher()

    futures = [publisher.publish(f"m{i}".encode(), attributes={"i": str(i)}) for i in range(250)]
    publisher.flush(timeout=10)

    ids = [f.result(timeout=10) for f in futures]
    assert done.wait(timeout=10)
    assert topic.join(timeout=10) is True
    assert sorted(m.message_id for m in seen) == sorted(ids)
    assert len(set(ids)) == 250
    assert sorted(int(m.attributes["i"]) for m in seen) == list(range(250))
    publisher.close()


def test_broadcast_subscriber_sees_what_is_published_while_subscribed(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    topic.create_group("keep")
    topic.publish("before")
    reader = topic.subscription()

    topic.publish("during")
    delivery = reader.receive(timeout=10)
    delivery.ack()

    assert (delivery.message, delivery.group) == ("during", None)
    reader.unsubscribe()


def test_outcome_and_join_wait_for_a_broadcast_subscriber_attached_at_publish(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    reader = topic.subscription()
    report = topic.publish("to the reader")

    with pytest.raises(FutureTimeout):
        report.outcome.result(timeout=0.5)  # a bounded wait: nobody settled it yet
    assert topic.join(timeout=0.3) is False
    assert (report.broadcast, topic.stats().pending) == (1, 1)
    delivery = reader.receive(timeout=10)
    delivery.ack()

    assert report.outcome.result(timeout=10) == Outcome(acked=True, nacks=())
    assert topic.join(timeout=10) is True
    stats = topic.stats()
    assert (stats.published, stats.delivered, stats.pending) == (1, 1, 0)
    reader.unsubscribe()


def test_outcome_waits_for_both_a_group_and_a_broadcast_subscriber(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    member = topic.subscription(group="g")
    reader = topic.subscription()
    report = topic.publish("both")

    member.receive(timeout=10).ack()
    with pytest.raises(FutureTimeout):
        report.outcome.result(timeout=0.5)  # the group settled, the reader not yet
    assert topic.stats().pending == 1
    reader.receive(timeout=10).nack("unreadable")

    assert report.outcome.result(timeout=10).nacks == (
        Nack(f"subscriber:{reader.id}", "nack", "unreadable"),)
    assert topic.join(timeout=10) is True
    [letter] = list(topic.dead_letters)
    assert (letter.message, letter.group, letter.subscriber_id, letter.reason) == (
        "both", None, reader.id, "nack")
    stats = topic.stats()
    assert (stats.delivered, stats.nacked, stats.dead_lettered, stats.pending) == (0, 1, 1, 0)
    member.unsubscribe()
    reader.unsubscribe()


def test_unsubscribing_settles_what_a_broadcast_subscriber_did_not_read(
        any_bus: Bus, topic_name: str) -> None:
    topic = any_bus.create_topic(topic_name)
    reader = topic.subscription()
    reports = [topic.publish(i) for i in range(3)]
    assert topic.stats().pending == 3

    reader.unsubscribe()

    unsubscribed = Outcome(acked=False, nacks=(Nack(f"subscriber:{reader.id}", "unsubscribed"),))
    assert [r.outcome.result(timeout=10) for r in reports] == [unsubscribed] * 3
    assert topic.join(timeout=10) is True
    assert topic.stats().pending == 0
    later = topic.publish("after")
    assert later.outcome.result(timeout=10).nacks[0].reason == "no_subscribers"
