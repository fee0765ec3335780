"""The broker endpoint with a real Bus: RemoteBus mirrors Bus, leases and staging on the wire."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from actors.errors import MessageNotSerializableError
from runtime import Bus, Message
from runtime.broker._client import Channel
from runtime.broker._remote import RemoteBus, connect
from runtime.broker._server import BusServer
from runtime.errors import MessageTypeError, SettlementError, TopicNotFoundError, WouldBlock

KEY = b"broker-test-key"
LEASE = 30.0


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        bus.create_topic("orders", ack_timeout=None, max_delivery_attempts=3)
        bus.create_topic("typed", message_type=bytes)
        yield bus


def test_remote_bus_lists_topics_and_stats(remote: RemoteBus) -> None:
    assert sorted(remote.topics()) == ["orders", "typed"]
    assert set(remote.stats()) == {"orders", "typed"}
    assert remote.topic("orders").stats().published == 0


def test_unknown_topic_raises_topic_not_found(remote: RemoteBus) -> None:
    with pytest.raises(TopicNotFoundError):
        remote.topic("missing")


def test_remote_publish_reaches_a_local_member(bus: Bus, remote: RemoteBus) -> None:
    local = bus.topic("orders").subscription(group="billing")

    message_id = remote.topic("orders").publish({"order": 7}, key="c-7", attributes={"a": "b"})

    delivery = local.receive(timeout=5)
    assert (delivery.message, delivery.message_id, delivery.key) == ({"order": 7}, message_id, "c-7")
    assert delivery.attributes == {"a": "b"}
    delivery.ack()


def test_remote_publish_keeps_the_topic_checks(remote: RemoteBus) -> None:
    with pytest.raises(MessageTypeError):
        remote.topic("typed").publish("not bytes")


def test_remote_pull_subscription_acks_and_nacks(bus: Bus, remote: RemoteBus) -> None:
    subscription = remote.topic("orders").subscription(group="billing")
    bus.publish("orders", "first")
    bus.publish("orders", "second")

    first = subscription.receive(timeout=5)
    first.ack()
    second = subscription.receive(timeout=5)
    second.nack("try again")
    again = subscription.receive(timeout=5)
    again.ack()

    assert (first.message, second.message, again.message) == ("first", "second", "second")
    assert (second.attempt, again.attempt) == (1, 2)
    assert bus.topic("orders").join(timeout=5)
    assert bus.topic("orders").stats().delivered == 2
    with pytest.raises(SettlementError):
        first.ack()


def test_remote_receive_times_out_and_nowait_would_block(remote: RemoteBus) -> None:
    subscription = remote.topic("orders").subscription(group="billing")

    with pytest.raises(TimeoutError):
        subscription.receive(timeout=0.2)
    with pytest.raises(WouldBlock):
        subscription.receive_nowait()


def test_remote_publisher_sends_batches(bus: Bus, remote: RemoteBus) -> None:
    local = bus.topic("orders").subscription(group="billing")
    publisher = remote.topic("orders").publisher()

    futures = [publisher.publish(f"m{i}".encode(), ordering_key="k") for i in range(20)]
    publisher.flush(timeout=10)

    ids = [future.result(timeout=5) for future in futures]
    received = [local.receive(timeout=5) for _ in ids]
    assert [d.message_id for d in received] == ids
    assert [d.message.data for d in received] == [f"m{i}".encode() for i in range(20)]
    assert {d.key for d in received} == {"k"}


def test_disconnect_returns_unsettled_deliveries(bus: Bus, server: BusServer) -> None:
    with connect(server.address, authkey=KEY) as remote:
        subscription = remote.topic("orders").subscription(group="billing")
        bus.publish("orders", "held")
        held = subscription.receive(timeout=5)

    redelivered = bus.topic("orders").subscription(group="billing").receive(timeout=5)

    assert held.message == redelivered.message == "held"
    assert redelivered.attempt == 2


def test_untransferable_message_is_dead_lettered_and_the_puller_told(
    bus: Bus, remote: RemoteBus
) -> None:
    topic = bus.create_topic("plain")
    subscription = remote.topic("plain").subscription(group="billing")
    refused_id = topic.publish(object()).message_id
    topic.publish("fine")

    with pytest.raises(MessageNotSerializableError, match=f"{refused_id}.*builtins.object"):
        subscription.receive(timeout=5)
    delivery = subscription.receive(timeout=5)
    delivery.ack()

    assert delivery.message == "fine"
    assert topic.join(timeout=5)
    letters = list(topic.dead_letters)
    assert [(dl.message_id, dl.reason) for dl in letters] == [(refused_id, "error")]
    assert "cannot cross the broker" in (letters[0].error or "")


def test_lease_ops_replay_and_ack_over_the_wire(bus: Bus, server: BusServer) -> None:
    bus.topic("orders").create_group("spark")
    for i in range(5):
        bus.publish("orders", f"m{i}".encode())
    lease = ("orders", "spark", "query-1", LEASE)

    with Channel(server.address, KEY) as channel:
        start = channel.call("lease_position", *lease)
        end = channel.call("lease_latest", *lease, start, 3)
        once = channel.call("lease_fetch_arrow", *lease, start, end)
        again = channel.call("lease_fetch_arrow", *lease, start, end)
        position = channel.call("lease_ack", *lease, end)["position"]

    assert (start, end, position) == (0, 3, 3)
    assert type(once) is bytes and once == again  # one value on the wire: Arrow IPC
    table = pytest.importorskip("pyarrow").ipc.open_stream(once).read_all()
    assert table.column("payload").to_pylist() == [b"m0", b"m1", b"m2"]
    assert table.column("attempt").to_pylist() == [1, 1, 1]
    assert table.schema.metadata == {b"actorbus.end": b"3"}
    bus.topic("orders")._sync()
    assert bus.topic("orders").stats().delivered == 3


def test_staged_rows_publish_once_per_batch(bus: Bus, server: BusServer) -> None:
    local = bus.topic("orders").subscription(group="billing")
    columns = {"payload": [b"a", "b", b"bad"], "key": ["k", None, None],
               "error": [None, None, "poison"]}

    with Channel(server.address, KEY) as channel:
        channel.call("stage", "orders", "producer", "7", (0, 0, 0), columns)
        first = channel.call("commit", "orders", "producer", "7", [(0, 0, 0)])
        second = channel.call("commit", "orders", "producer", "7", [(0, 0, 0)])

    received = [local.receive(timeout=5) for _ in range(2)]
    assert (first, second) == (True, False)
    assert [d.message.data for d in received] == [b"a", b"b"]
    assert received[0].key == "k"
    letters = list(bus.topic("orders").dead_letters)
    assert [(dl.reason, dl.error, dl.message.data) for dl in letters] == [("error", "poison", b"bad")]
    with pytest.raises(WouldBlock):
        local.receive_nowait()


def test_staged_rows_are_accepted_when_staged(bus: Bus, server: BusServer) -> None:
    """A part is checked and stamped (ids, publish time) when staged; the commit fans
    the parts out in the order it lists them."""
    bus.create_topic("numbers", message_type=int)
    local = bus.topic("orders").subscription(group="billing", prefetch=8)
    with Channel(server.address, KEY) as channel:
        with pytest.raises(MessageTypeError):
            channel.call("stage", "numbers", "producer", "1", (0, 0, 0), {"payload": [b"x"]})
        before = time.time()
        channel.call("stage", "orders", "producer", "1", (0, 0, 0), {"payload": [b"a", b"b"]})
        channel.call("stage", "orders", "producer", "1", (1, 0, 0), {"payload": [b"c"]})
        staged = time.time()
        assert channel.call("commit", "numbers", "producer", "1", [(0, 0, 0)]) is True
        assert channel.call("commit", "orders", "producer", "1", [(1, 0, 0), (0, 0, 0)]) is True

    received = [local.receive(timeout=5) for _ in range(3)]
    assert [d.message.data for d in received] == [b"c", b"a", b"b"]
    assert all(before <= d.message.publish_time <= staged for d in received)
    assert len({d.message.message_id for d in received}) == 3
    assert bus.topic("numbers").stats().published == 0
    assert bus.topic("orders").stats().published == 3


def test_publish_batch_takes_messages_only(server: BusServer) -> None:
    with Channel(server.address, KEY) as channel:
        ids, error = channel.call("publish_batch", "orders", [Message(data=b"x"), Message(data=b"y")])
        with pytest.raises(TypeError):
            channel.call("publish_batch", "orders", [b"raw"])

    assert error is None
    assert len(set(ids)) == 2
