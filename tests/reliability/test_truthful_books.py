"""What the books say is true (issue 17 items 4 and 13): a Publisher future's verdict matches
what the topic counted, and dead letters are bounded by default."""

from __future__ import annotations

import threading
from concurrent.futures import wait
from typing import Any

import pytest
from support.reliability import wait_until

from runtime import BatchSettings, Bus, Delivery
from runtime.errors import TopicClosedError

pytestmark = pytest.mark.reliability


def _stuck_group(topic: Any, release: threading.Event) -> None:
    """A group whose member holds its first delivery until ``release``."""

    def handler(delivery: Delivery[Any]) -> None:
        release.wait(30)
        delivery.ack()

    topic.subscribe(handler, group="g")


@pytest.mark.parametrize("held_by", ["max_pending", "broadcast_ring"])
def test_a_half_admitted_publisher_batch_at_close_resolves_exactly_what_was_published(
    held_by: str,
) -> None:
    release = threading.Event()
    with Bus() as bus:
        if held_by == "max_pending":  # one message at a time: the 31st waits for a slot
            topic = bus.create_topic("t", max_pending=30)
            _stuck_group(topic, release)
        else:  # chunks of 8: the second waits for a reader that never reads
            topic = bus.create_topic("t", broadcast_capacity=8, ack_timeout=None)
            topic.subscription()
        publisher = topic.publisher(batching=BatchSettings(max_messages=100, max_latency=60))
        futures = [publisher.publish(b"m%d" % n) for n in range(100)]
        assert wait_until(lambda: topic.stats().published >= 8, timeout=10)

        topic.close()
        release.set()
        wait(futures, timeout=10)

        resolved = [f.result() for f in futures if f.exception() is None]
        failed = [f.exception() for f in futures if f.exception() is not None]
        stats = topic.stats()
    assert len(resolved) + len(failed) == 100
    assert 0 < len(resolved) < 100
    assert len(resolved) == stats.published  # each id the topic counted, and only those
    assert futures[:len(resolved)] == [f for f in futures if f.exception() is None]
    assert all(isinstance(e, TopicClosedError) for e in failed)
    letters = {d.message_id for d in topic.dead_letters}
    assert letters <= set(resolved)
    assert len(letters) + stats.delivered == len(resolved)


def test_dead_letters_are_bounded_by_default() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")
        publisher = topic.publisher()

        for n in range(10_050):
            publisher.publish(b"%d" % n)  # no subscriber: every message is dead-lettered
        publisher.flush(timeout=60)

        stats = topic.stats()
        letters = list(topic.dead_letters)
        evicted = topic.dead_letters.evicted
    assert (stats.published, stats.dead_lettered) == (10_050, 10_050)
    assert (len(letters), evicted) == (10_000, 50)
    assert letters[0].message.data == b"50" and letters[-1].message.data == b"10049"
