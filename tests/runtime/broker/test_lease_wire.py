"""The lease log through a real broker socket: a bad message fails alone, unread leases
go back to the group without counting an attempt."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtime import Bus, Message
from runtime.broker._client import Channel
from runtime.broker._server import BusServer, serve

KEY = b"lease-wire-test-key"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(bus: Bus, clock: FakeClock) -> Iterator[BusServer]:
    with serve(bus, authkey=KEY, clock=clock) as server:
        yield server


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _payloads(channel: Channel, lease: tuple[Any, ...], start: int, end: int) -> list[bytes]:
    import pyarrow as pa

    data = channel.call("lease_fetch_arrow", *lease, start, end)
    return list(pa.ipc.open_stream(data).read_all().column("payload").to_pylist())


def _drain(topic: Any, group: str, count: int) -> list[Any]:
    reader = topic.subscription(group=group, prefetch=64)
    deliveries: list[Any] = []
    while len(deliveries) < count:
        deliveries += reader.receive_many(count - len(deliveries), timeout=10)
    for delivery in deliveries:
        delivery.ack()
    reader.unsubscribe()
    return deliveries


def test_a_message_json_cannot_encode_is_dead_lettered_alone(bus: Bus, server: BusServer) -> None:
    topic = bus.create_topic("t", ack_timeout=None)
    topic.create_group("spark")
    for i in range(10):
        topic.publish(f"m{i:02d}")
    topic.publish(_nested(100_000))  # json.dumps raises RecursionError
    for i in range(10, 20):
        topic.publish(f"m{i:02d}")
    lease = ("t", "spark", "q", 30.0)

    with Channel(server.address, KEY) as channel:
        end = channel.call("lease_latest", *lease, 0, 21)
        payloads = _payloads(channel, lease, 0, end)
        channel.call("lease_ack", *lease, end)
    topic._sync()
    stats = topic.stats()
    letters = list(bus.dead_letters("t"))

    assert end == 20
    assert payloads == [f"m{i:02d}".encode() for i in range(20)]
    assert [d.reason for d in letters] == ["error"]
    assert "cannot encode" in (letters[0].error or "")
    assert (stats.delivered, stats.dead_lettered, stats.pending) == (20, 1, 0)


def test_a_vanished_consumer_s_unread_leases_go_back_without_an_attempt(
    bus: Bus, server: BusServer, clock: FakeClock,
) -> None:
    # The default max_delivery_attempts=1: an attempt counted would dead-letter them.
    topic = bus.create_topic("t", ack_timeout=None)
    topic.create_group("spark")
    topic._publish_batch([Message(data=b"%02d" % i) for i in range(30)]).result(timeout=10)
    lease = ("t", "spark", "gone", 30.0)

    with Channel(server.address, KEY) as channel:
        end = channel.call("lease_latest", *lease, 0, 20)
        read = _payloads(channel, lease, 0, 5)  # a task read five, then the query vanished
    clock.now += 31.0
    server.service.sweep()  # the lease expired: everything held goes back
    deliveries = _drain(topic, "spark", 25)
    topic._sync()
    stats = topic.stats()
    letters = [(d.message.data, d.reason, d.error) for d in bus.dead_letters("t")]

    assert (end, read) == (20, [b"%02d" % i for i in range(5)])
    assert sorted(d.message.data for d in deliveries) == [b"%02d" % i for i in range(5, 30)]
    assert {d.attempt for d in deliveries} == {1}
    assert letters == [(b"%02d" % i, "nack", "lease expired") for i in range(5)]
    assert (stats.delivered, stats.dead_lettered, stats.pending) == (25, 5, 0)
