"""Remote deliveries on a real loopback broker: what crosses, truthful settlement, no waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.reliability import wait_until

from runtime import Bus
from runtime.broker._remote import RemoteBus
from runtime.broker._server import BusServer
from runtime.errors import SettlementError

KEY = b"remote-delivery-key"


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        bus.create_topic("orders", ack_timeout=None)
        bus.create_topic("short", ack_timeout=0.2)
        yield bus


def test_a_publisher_message_without_attributes_crosses_a_remote_receive(
    bus: Bus, remote: RemoteBus,
) -> None:
    subscription = remote.topic("orders").subscription(group="billing")
    publisher = bus.topic("orders").publisher()
    ids = [publisher.publish(b"plain").result(timeout=5),
           publisher.publish(b"tagged", attributes={"k": "v"}).result(timeout=5)]

    first, second = subscription.receive(timeout=5), subscription.receive(timeout=5)
    first.ack()
    second.ack()

    assert [(d.message_id, d.message.data, d.message.attributes, d.attributes)
            for d in (first, second)] == [
        (ids[0], b"plain", {}, {}), (ids[1], b"tagged", {"k": "v"}, {"k": "v"})]
    assert type(first.message.attributes) is dict
    assert bus.topic("orders").join(timeout=5)
    assert len(bus.topic("orders").dead_letters) == 0


def test_a_remote_publisher_message_without_attributes_reaches_a_remote_reader(
    bus: Bus, remote: RemoteBus,
) -> None:
    subscription = remote.topic("orders").subscription(group="billing")
    publisher = remote.topic("orders").publisher()

    message_id = publisher.publish(b"plain").result(timeout=5)
    delivery = subscription.receive(timeout=5)
    delivery.ack()

    assert (delivery.message_id, delivery.message.data, delivery.message.attributes) == (
        message_id, b"plain", {})
    assert bus.topic("orders").join(timeout=5)


def test_dead_letters_of_publisher_messages_list_remotely(bus: Bus, remote: RemoteBus) -> None:
    orders = bus.topic("orders")
    orders.subscribe(lambda d: d.nack("no"), group="billing")
    orders.publisher().publish(b"plain").result(timeout=5)
    assert orders.join(timeout=5)

    letters = list(remote.dead_letters("orders"))

    assert [(d.message.data, d.message.attributes, d.reason, d.error) for d in letters] == [
        (b"plain", {}, "nack", "no")]


def test_a_failed_remote_ack_raises_and_the_flags_say_timed_out(bus: Bus, remote: RemoteBus) -> None:
    subscription = remote.topic("short").subscription(group="billing")
    bus.publish("short", "late")
    delivery = subscription.receive(timeout=5)
    assert bus.topic("short").join(timeout=5)  # the server's deadline dead-lettered it

    with pytest.raises(SettlementError, match="timed out"):
        delivery.ack()

    assert (delivery.state, delivery.pending, delivery.acked, delivery.nacked, delivery.timed_out) == (
        "nacked", False, False, True, True)
    with pytest.raises(SettlementError, match="timed out"):
        delivery.nack("again")
    assert [d.reason for d in bus.topic("short").dead_letters] == ["timeout"]


def test_a_remote_ack_that_succeeds_reads_acked_only_after_the_server_answered(
    bus: Bus, remote: RemoteBus,
) -> None:
    subscription = remote.topic("orders").subscription(group="billing")
    bus.publish("orders", "m")
    delivery = subscription.receive(timeout=5)

    delivery.ack()

    assert (delivery.state, delivery.acked, delivery.nacked, delivery.timed_out) == (
        "acked", True, False, False)
    with pytest.raises(SettlementError, match="acked"):
        delivery.ack()
    assert bus.topic("orders").join(timeout=5)
    assert bus.topic("orders").stats().delivered == 1


def test_acks_from_another_thread_go_out_while_a_receive_waits(
    bus: Bus, server: BusServer, remote: RemoteBus,
) -> None:
    subscription = remote.topic("orders").subscription(group="billing")
    for n in range(20):
        bus.publish("orders", n)
    deliveries = [subscription.receive(timeout=5) for _ in range(20)]
    late: list[Any] = []
    receiving = threading.Thread(target=lambda: late.append(subscription.receive(timeout=30)))
    receiving.start()
    # the pull connection's session is serving that receive on the server: it waits there
    assert wait_until(lambda: any(s.busy for s in list(server._sessions)), 10.0)

    started = time.monotonic()
    for delivery in deliveries:
        delivery.ack()
    elapsed = time.monotonic() - started

    bus.publish("orders", "last")
    receiving.join(timeout=10)
    assert not receiving.is_alive()
    assert [d.message for d in deliveries] == list(range(20))
    assert all(d.acked for d in deliveries)
    assert late[0].message == "last"
    late[0].ack()
    assert elapsed < 2.0, f"20 acks took {elapsed:.2f}s behind a blocked receive"
    assert bus.topic("orders").join(timeout=5)
    assert bus.topic("orders").stats().delivered == 21
