"""Bulk acks of leased deliveries: one settlement message per hand-over, none lost."""

from __future__ import annotations

from typing import Any

from runtime import Bus
from runtime.broker._settle import ack_in_bulk
from runtime.core.settlement._delivery import Delivery, HandOver
from runtime.errors import WouldBlock


class RecordingSink:
    def __init__(self) -> None:
        self.mail: list[Any] = []

    def tell(self, message: Any) -> None:
        self.mail.append(message)


def handed_over(sink: RecordingSink, count: int, start: int = 0) -> list[Delivery[Any]]:
    handover = HandOver(sink, 1, "spark")
    deliveries: list[Delivery[Any]] = [
        Delivery((start + i, f"m{start + i}", b"x", None, {}, "t", None), handover, i, 1)
        for i in range(count)
    ]
    handover.pending = dict(enumerate(deliveries))
    return deliveries


def test_bulk_ack_sends_one_list_per_handover_in_order() -> None:
    sink = RecordingSink()
    first, second = handed_over(sink, 3), handed_over(sink, 2, start=3)

    ack_in_bulk(first + second)

    assert [[d.message_id for d in batch] for batch in sink.mail] == [
        ["m0", "m1", "m2"], ["m3", "m4"]]
    assert {d.state for d in first + second} == {"acked"}


def test_bulk_ack_skips_deliveries_settled_meanwhile() -> None:
    sink = RecordingSink()
    deliveries = handed_over(sink, 3)
    deliveries[1].nack("elsewhere")

    ack_in_bulk(deliveries)

    assert [d.state for d in deliveries] == ["acked", "nacked", "acked"]
    assert sink.mail[0] is deliveries[1]  # the nack went alone, before the bulk ack
    assert [d.message_id for d in sink.mail[1]] == ["m0", "m2"]
    assert len(sink.mail) == 2


def test_bulk_ack_settles_a_real_topic() -> None:
    with Bus() as bus:
        topic = bus.create_topic("orders", ack_timeout=None, balanced_capacity=1000)
        member = topic.subscription(group="spark", prefetch=64)
        for i in range(200):
            topic.publish(f"m{i}".encode())
        deliveries: list[Any] = []
        while len(deliveries) < 200:
            deliveries += member.receive_many(200 - len(deliveries), timeout=5)

        ack_in_bulk(deliveries)

        assert topic.join(timeout=5)
        stats = topic.stats()
        assert (stats.delivered, stats.nacked, stats.pending) == (200, 0, 0)
        member.unsubscribe()


def test_a_batch_publish_into_a_full_group_says_which_group_holds_it() -> None:
    from runtime import Message
    from runtime.broker._service import BrokerService

    with Bus() as bus:
        topic = bus.create_topic("orders", balanced_capacity=4)
        topic.create_group("billing")  # nobody reads it: it fills after 4
        service = BrokerService(bus, publish_timeout=0.5)

        ids, error = service.publish_batch("orders", [Message(data=b"m%d" % n) for n in range(10)])
        published = topic.stats().published
        service.close()
        topic.close()

    assert len(ids) == published == 4  # the group's room; the rest refused, never counted
    assert isinstance(error, WouldBlock)
    text = str(error)
    assert "topic 'orders' published 4 of 10" in text and "billing" in text
