"""Bulk pulls: a group member with a deep prefetch, and receive_many."""

from __future__ import annotations

import pytest

from runtime import Bus, Message
from runtime.errors import InvalidSettingsError


def test_receive_many_takes_a_prefetched_batch_in_order() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=None)
        pull = topic.subscription(group="g", prefetch=64)
        for i in range(50):
            topic.publish(i)

        taken: list[int] = []
        while len(taken) < 50:
            batch = pull.receive_many(100, timeout=5)
            for delivery in batch:
                delivery.ack()
            taken.extend(d.message for d in batch)

        assert taken == list(range(50))
        assert topic.join(timeout=5)
        assert topic.stats().delivered == 50


def test_receive_many_times_out_when_nothing_comes() -> None:
    with Bus() as bus:
        pull = bus.create_topic("t").subscription(group="g", prefetch=8)

        with pytest.raises(TimeoutError):
            pull.receive_many(10, timeout=0.05)


@pytest.mark.parametrize("prefetch", [0, -1, 1.5, True])
def test_prefetch_must_be_a_positive_int(prefetch: object) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")

        with pytest.raises(InvalidSettingsError, match="prefetch"):
            topic.subscription(group="g", prefetch=prefetch)  # type: ignore[arg-type]


def test_refused_message_is_dead_lettered_and_counted() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")

        topic._dead_letter(Message(data=b"bad row"), reason="error", error="flagged by Spark")

        [letter] = list(topic.dead_letters)
        assert (letter.reason, letter.error, letter.subscriber_id) == ("error", "flagged by Spark", -1)
        assert letter.message.data == b"bad row" and letter.message_id
        stats = topic.stats()
        assert (stats.published, stats.nacked, stats.dead_lettered, stats.pending) == (1, 1, 1, 0)
