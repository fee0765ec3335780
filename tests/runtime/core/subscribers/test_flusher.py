"""Thread subscribers send each settlement while their batch still runs (DESIGN §3.11)."""

from __future__ import annotations

import threading

from runtime import Bus, Delivery


def test_a_thread_members_acks_leave_while_a_later_handler_in_its_batch_hangs() -> None:
    release = threading.Event()

    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 3:
            release.wait(30)
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.create_group("g")  # messages wait in the group: one hand-over of all five
        reports = [topic.publish(n) for n in range(5)]
        topic.subscribe(handler, group="g")

        try:
            early = [r.outcome.result(timeout=5) for r in reports[:3]]
            hung = reports[3].outcome.done()
        finally:
            release.set()
        assert topic.join(timeout=10)

    assert [o.acked for o in early] == [True, True, True]
    assert not hung


def test_a_broadcast_subscribers_acks_leave_while_a_later_handler_in_its_batch_hangs() -> None:
    holding, go, release = threading.Event(), threading.Event(), threading.Event()

    def handler(delivery: Delivery[object]) -> None:
        if delivery.message == "hold":
            holding.set()
            go.wait(30)
        elif delivery.message == 3:
            release.wait(30)
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(handler)
        topic.publish("hold")
        assert holding.wait(10)
        reports = [topic.publish(n) for n in range(5)]  # wait in the ring: the next batch
        go.set()

        try:
            early = [r.outcome.result(timeout=5) for r in reports[:3]]
            hung = reports[3].outcome.done()
        finally:
            release.set()
        assert topic.join(timeout=10)

    assert [o.acked for o in early] == [True, True, True]
    assert not hung
