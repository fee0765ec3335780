"""Topic.close and join (issue 3 item 8)."""

from __future__ import annotations

import threading

import pytest

from runtime import Bus, Delivery, Message, Nack
from runtime.core.subscribers import _subscribers
from runtime.errors import SettlementError, TopicClosedError


def test_close_force_nacks_pending_deliveries_as_closed(bus: Bus) -> None:
    topic = bus.create_topic("t", ack_timeout=None)
    reader = topic.subscription(group="g")
    report = topic.publish(1)
    delivery = reader.receive(timeout=5)

    topic.close()

    assert report.outcome.result(timeout=5).nacks == (Nack("group:g", "closed"),)
    assert [(d.message, d.reason, d.subscriber_id) for d in topic.dead_letters] == [
        (1, "closed", reader.id),
    ]
    assert topic.stats().pending == 0
    with pytest.raises(SettlementError):
        delivery.ack()


def test_close_dead_letters_what_waits_in_member_less_groups_and_the_ring(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.create_group("held")
    unread = topic.subscription()
    for n in range(3):
        topic.publish(n)

    topic.close()

    reasons = sorted((d.message, d.group or "", d.reason) for d in topic.dead_letters)
    assert reasons == sorted(
        [(n, "held", "closed") for n in range(3)] + [(n, "", "closed") for n in range(3)]
    )
    assert unread.id == 1
    assert topic.join(timeout=5)


def test_close_force_nacks_a_delivery_held_inside_a_handler(bus: Bus) -> None:
    topic = bus.create_topic("t")
    inside, release = threading.Event(), threading.Event()
    errors: list[Exception] = []

    def handler(delivery: Delivery[int]) -> None:
        inside.set()
        release.wait(10)
        try:
            delivery.ack()
        except SettlementError as exc:
            errors.append(exc)

    topic.subscribe(handler, group="g")
    report = topic.publish(1)
    inside.wait(5)
    topic.close()
    release.set()

    assert report.outcome.result(timeout=5).nacks == (Nack("group:g", "closed"),)
    assert topic.join(timeout=5)
    bus.remove_topic("t")
    assert len(errors) == 1


def test_close_is_idempotent_and_keeps_dead_letters_and_subscribers(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.subscribe(lambda d: d.ack(), group="g")
    topic.publish(1).outcome.result(timeout=5)
    bus.create_topic("empty").publish("x")

    topic.close()
    topic.close()

    assert topic.closed
    assert topic.groups() == ["g"]
    assert len(bus.topic("empty").dead_letters) == 1
    assert topic.stats().delivered == 1


def test_publish_and_subscribe_raise_after_close(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.close()

    with pytest.raises(TopicClosedError):
        topic.publish(1)
    with pytest.raises(TopicClosedError):
        topic.subscribe(lambda d: None)
    with pytest.raises(TopicClosedError):
        topic.subscription(group="g")
    with pytest.raises(TopicClosedError):
        topic._publish_batch([Message(data=b"x")]).result(timeout=5)


def test_join_returns_true_once_nothing_is_pending(bus: Bus) -> None:
    topic = bus.create_topic("t", ack_timeout=None)
    reader = topic.subscription(group="g")
    topic.publish(1)

    assert topic.join(timeout=0.05) is False
    reader.receive(timeout=5).ack()
    assert topic.join(timeout=5) is True
    assert topic.join() is True


def test_pull_receive_raises_topic_closed_after_close(bus: Bus) -> None:
    topic = bus.create_topic("t")
    group_reader = topic.subscription(group="g")
    ring_reader = topic.subscription()
    waiting = threading.Event()
    raised: list[BaseException] = []

    def blocked_receive() -> None:
        waiting.set()
        try:
            group_reader.receive(timeout=10)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=blocked_receive)
    thread.start()
    waiting.wait(5)
    topic.close()
    thread.join(10)

    assert [type(e) for e in raised] == [TopicClosedError]
    with pytest.raises(TopicClosedError):
        ring_reader.receive(timeout=1)
    assert list(ring_reader) == []


@pytest.mark.parametrize("end", ["close", "delete_group"])
def test_a_queue_longer_than_one_wait_still_ends_whole(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, end: str,
) -> None:
    """Ending a queue takes as long as it takes: a group that sweeps longer than one
    bounded wait (there 10 s: a million queued messages) is waited for while it lives."""
    monkeypatch.setattr(_subscribers, "_ASK_TIMEOUT", 0.001)
    count = 20_000
    topic = bus.create_topic("t", ack_timeout=None, balanced_capacity=count + 1,
                             dead_letter_limit=count)
    topic.create_group("held")
    topic._publish_batch([Message(data=b"%06d" % n) for n in range(count)]).result(timeout=30)

    if end == "close":
        topic.close()
        reason = "closed"
    else:
        topic.delete_group("held")
        reason = "unsubscribed"

    stats = topic.stats()
    assert (stats.published, stats.dead_lettered, stats.pending) == (count, count, 0)
    letters = topic.dead_letters.drain()
    assert len(letters) == count
    assert {letter.reason for letter in letters} == {reason}
    assert sorted(letter.message.data for letter in letters) == [b"%06d" % n for n in range(count)]


def test_close_waits_for_a_tracker_still_working_through_its_backlog(
    bus: Bus, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    from runtime.core import _topic

    monkeypatch.setattr(_topic, "_STOP_TIMEOUT", 0.05)  # the tracker needs ~8 of these
    topic = bus.create_topic("t", ack_timeout=None)
    seen: list[int] = []

    def slow(letter: object) -> None:
        time.sleep(0.01)  # sleep-ok: a slow callback (the work), not a wait on a result
        seen.append(letter.message)  # type: ignore[attr-defined]

    topic.dead_letters.on_dead_letter(slow)
    reader = topic.subscription(group="g", prefetch=40)
    for n in range(40):
        topic.publish(n)
    deliveries = [reader.receive(timeout=5) for _ in range(40)]
    for delivery in deliveries:
        delivery.nack("bad")

    topic.close()  # before the fix: TimeoutError from the tracker's sweep

    assert seen == list(range(40))  # every letter, in order, through the tracker
    assert [d.reason for d in topic.dead_letters] == ["nack"] * 40  # nothing swept "closed"
    stats = topic.stats()
    assert (stats.dead_lettered, stats.pending) == (40, 0)


def test_close_sweeps_the_books_itself_when_the_tracker_is_stuck(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from runtime.core import _topic

    monkeypatch.setattr(_topic, "_STOP_TIMEOUT", 0.05)
    topic = bus.create_topic("t", ack_timeout=None)
    inside, release = threading.Event(), threading.Event()

    def stuck(letter: object) -> None:
        if letter.reason == "nack":  # type: ignore[attr-defined]
            inside.set()
            release.wait(30)  # the tracker hangs in this letter's callback

    topic.dead_letters.on_dead_letter(stuck)
    reader = topic.subscription(group="g", prefetch=5)
    for n in range(5):
        topic.publish(n)
    deliveries = [reader.receive(timeout=5) for _ in range(5)]
    deliveries[0].nack("bad")
    assert inside.wait(5)
    try:
        with caplog.at_level("WARNING", logger="runtime.core._topic"):
            topic.close()  # returns while the callback still blocks the tracker
        assert not release.is_set()
        stats = topic.stats()
        assert (stats.dead_lettered, stats.pending) == (5, 0)
        assert sorted(d.reason for d in topic.dead_letters) == ["closed"] * 4 + ["nack"]
        assert "settled nothing" in caplog.text
    finally:
        release.set()
    assert topic.join(timeout=5)
