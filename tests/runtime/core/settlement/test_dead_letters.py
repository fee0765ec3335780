"""Dead letters: reasons, drain/iter, callback, replay, limit (issue 3 item 7)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime import Bus, DeadLetter, DeadLetterQueue, Message, Topic
from runtime.core._topic_actor import batch_ids
from runtime.errors import TopicClosedError, TopicNotFoundError


def _letter(n: int) -> DeadLetter:
    return DeadLetter(n, str(n), "t", 1, None, "nack", None, 1, 0.0)


def test_iteration_is_oldest_first_and_does_not_remove() -> None:
    queue = DeadLetterQueue()
    for n in range(3):
        queue.append(_letter(n))

    first = [d.message for d in queue]
    second = [d.message for d in queue]

    assert first == second == [0, 1, 2]
    assert len(queue) == 3


def test_drain_empties_then_returns_in_order() -> None:
    queue = DeadLetterQueue()
    for n in range(3):
        queue.append(_letter(n))

    drained = queue.drain()

    assert [d.message for d in drained] == [0, 1, 2]
    assert len(queue) == 0
    assert queue.drain() == []


def test_limit_keeps_the_newest_and_counts_evictions() -> None:
    queue = DeadLetterQueue(limit=2)
    for n in range(5):
        queue.append(_letter(n))

    assert [d.message for d in queue] == [3, 4]
    assert queue.evicted == 3


def test_clear_drops_everything() -> None:
    queue = DeadLetterQueue()
    queue.append(_letter(1))

    queue.clear()

    assert list(queue) == []


def test_no_subscriber_publish_dead_letters_and_counts(bus: Bus) -> None:
    topic = bus.create_topic("t")

    topic.publish("x")

    [letter] = topic.dead_letters
    assert (letter.topic, letter.reason, letter.subscriber_id, letter.group) == (
        "t", "no_subscribers", -1, None,
    )
    assert letter.message_id == "1"
    stats = topic.stats()
    assert (stats.nacked, stats.dead_lettered) == (1, 1)


def test_on_dead_letter_callback_is_one_and_replaceable(bus: Bus) -> None:
    topic = bus.create_topic("t")
    first: list[str] = []
    second: list[str] = []

    topic.dead_letters.on_dead_letter(lambda d: first.append(d.message))
    topic.publish("a")
    topic.dead_letters.on_dead_letter(lambda d: second.append(d.message))
    topic.publish("b")
    topic.dead_letters.on_dead_letter(None)
    topic.publish("c")

    assert (first, second) == (["a"], ["b"])
    assert len(topic.dead_letters) == 3


def test_callback_runs_for_tracker_dead_letters(bus: Bus) -> None:
    topic = bus.create_topic("t")
    got: list[DeadLetter] = []
    arrived = threading.Event()
    topic.dead_letters.on_dead_letter(lambda d: (got.append(d), arrived.set()))
    topic.subscribe(lambda d: d.nack("no"), group="g")

    topic.publish(5)

    assert arrived.wait(5)
    assert (got[0].message, got[0].reason, got[0].error, got[0].group) == (5, "nack", "no", "g")


def test_replay_republishes_oldest_first_and_returns_the_count(bus: Bus) -> None:
    topic = bus.create_topic("t")
    for n in range(3):
        topic.publish(n, key=f"k{n}", attributes={"n": str(n)})
    reader = topic.subscription(group="g")

    count = topic.dead_letters.replay()

    assert count == 3
    assert len(topic.dead_letters) == 0
    got = [reader.receive(timeout=5) for _ in range(3)]
    assert [(d.message, d.key, d.attributes) for d in got] == [
        (n, f"k{n}", {"n": str(n)}) for n in range(3)
    ]
    assert [d.message_id for d in got] == ["4", "5", "6"]


def test_replay_to_another_topic_by_name_or_object(bus: Bus) -> None:
    source = bus.create_topic("source")
    target = bus.create_topic("target")
    reader = target.subscription(group="g")
    source.publish("a")
    source.publish("b")

    assert source.dead_letters.replay(topic="target") == 2
    source.publish("c")
    assert source.dead_letters.replay(topic=target) == 1

    assert [reader.receive(timeout=5).message for _ in range(3)] == ["a", "b", "c"]
    with pytest.raises(TopicNotFoundError):
        source.dead_letters.replay(topic="missing")


def test_replay_restamps_publisher_messages(bus: Bus) -> None:
    topic = bus.create_topic("t")
    ids = topic._publish_batch([Message(data=b"x", ordering_key="k")]).result(timeout=5)
    reader = topic.subscription(group="g")

    topic.dead_letters.replay()
    delivery = reader.receive(timeout=5)

    assert delivery.message.data == b"x"
    assert delivery.message.message_id == delivery.message_id != ids[0]
    assert delivery.key == "k"


def test_replay_to_a_closed_topic_raises_and_keeps_the_letters(bus: Bus) -> None:
    topic = bus.create_topic("t")
    topic.publish(1)
    topic.close()

    with pytest.raises(TopicClosedError):
        topic.dead_letters.replay()

    assert [d.message for d in topic.dead_letters] == [1]


def test_dead_letter_limit_setting_bounds_the_topic_queue(bus: Bus) -> None:
    topic = bus.create_topic("t", dead_letter_limit=2)

    for n in range(4):
        topic.publish(n)

    assert [d.message for d in topic.dead_letters] == [2, 3]
    assert topic.stats().dead_lettered == 4


def _backlog(bus: Bus, name: str, count: int, limit: int) -> Topic[Any]:
    topic = bus.create_topic(name, dead_letter_limit=limit, ack_timeout=None)
    topic.create_group("g")
    batch = ([b"m%d" % i for i in range(count)], [{}] * count, [None] * count)
    batch_ids(topic._publish_batches([batch])).result(timeout=10)
    return topic


def test_closing_a_backlog_past_the_limit_keeps_the_newest_letters_and_counts_all(bus: Bus) -> None:
    topic = _backlog(bus, "big", 50, limit=5)
    topic.dead_letters.append(_letter(-1))  # an older letter, pushed out as well

    topic.close()

    letters = list(topic.dead_letters)
    assert [d.message.data for d in letters] == [b"m45", b"m46", b"m47", b"m48", b"m49"]
    assert {(d.reason, d.group, d.attempts) for d in letters} == {("closed", "g", 0)}
    assert topic.dead_letters.evicted == 46
    stats = topic.stats()
    assert (stats.nacked, stats.dead_lettered, stats.pending) == (50, 50, 0)


def test_closing_a_backlog_with_a_callback_hands_it_every_letter(bus: Bus) -> None:
    topic = _backlog(bus, "watched", 30, limit=5)
    seen: list[bytes] = []
    topic.dead_letters.on_dead_letter(lambda d: seen.append(d.message.data))

    topic.close()

    assert seen == [b"m%d" % i for i in range(30)]
    assert len(topic.dead_letters) == 5 and topic.dead_letters.evicted == 25
