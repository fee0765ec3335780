"""A remote Publisher's batch carries its deadline into the broker's topic (issue 49).

A batch held by backpressure past its ``publish_timeout`` publishes the messages before the
one it waited for and refuses the rest, and the broker's answer says which: the resolved
futures are exactly what is delivered, in order, and a failed future is never delivered,
not even once the backpressure is released.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from multiprocessing.connection import Connection, Listener
from typing import Any

import pytest

from runtime import BatchSettings, Bus, Message
from runtime.broker._auth import authenticate_server
from runtime.broker._client import Channel
from runtime.broker._remote import ANSWER_GRACE, RemoteBus, _BatchPath
from runtime.broker._server import BusServer, serve
from runtime.broker._wire import framed, unframed
from runtime.errors import BrokerTimeoutError, WouldBlock

KEY = b"batch-deadline-key"
BATCH = BatchSettings(max_messages=1000, max_latency=60.0)  # one batch, sent by flush()


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        yield bus


def _outcomes(futures: list[Future[str]]) -> tuple[list[str], list[BaseException]]:
    """The ids of the resolved futures and the errors of the failed ones, each in order."""
    ids: list[str] = []
    errors: list[BaseException] = []
    for future in futures:
        error = future.exception(timeout=30)
        if error is None:
            ids.append(future.result())
        else:
            errors.append(error)
    return ids, errors


def _drain_to_marker(topic: Any, subscription: Any) -> list[tuple[str, bytes]]:
    """Ack everything up to a marker sent through the topic's mailbox after every batch
    sent before it: (id, data) of each message published before the marker, in order."""
    marker = topic._publish_batch([Message(data=b"marker")])
    seen: list[tuple[str, bytes]] = []
    while True:
        delivery = subscription.receive(timeout=10)
        delivery.ack()
        if delivery.message.data == b"marker":
            break
        seen.append((delivery.message_id, delivery.message.data))
    marker.result(timeout=10)
    return seen


def test_a_batch_held_on_max_pending_past_its_timeout_fails_and_is_never_delivered(
    bus: Bus, remote: RemoteBus,
) -> None:
    topic = bus.create_topic("held", max_pending=3, ack_timeout=None)
    subscription = topic.subscription(group="g")
    topic._publish_batch([Message(data=b"first-%d" % n) for n in range(3)]).result(10)
    publisher = remote.topic("held").publisher(publish_timeout=0.5, batching=BATCH)
    futures = [publisher.publish(b"m%02d" % n) for n in range(20)]
    started = time.monotonic()

    publisher.flush(timeout=30)
    ids, errors = _outcomes(futures)

    answered = time.monotonic() - started
    assert ids == []  # max_pending was full the whole time: nothing of the batch went in
    assert len(errors) == 20 and all(isinstance(e, WouldBlock) for e in errors)
    assert "topic 'held' published 0 of 20" in str(errors[0])
    assert 0.5 <= answered < 0.5 + ANSWER_GRACE  # the broker's answer, past the client's own 0.5 s
    assert (topic.stats().published, topic.stats().pending) == (3, 3)

    seen = _drain_to_marker(topic, subscription)  # backpressure released

    assert [data for _, data in seen] == [b"first-0", b"first-1", b"first-2"]
    assert topic.join(timeout=10)
    assert topic.stats().published == 4  # the three, the marker: none of the twenty
    publisher.close(timeout=10)


def test_a_batch_whose_timeout_passes_mid_batch_publishes_its_prefix(
    bus: Bus, remote: RemoteBus,
) -> None:
    topic = bus.create_topic("prefix", max_pending=8, ack_timeout=None)
    subscription = topic.subscription(group="g")
    publisher = remote.topic("prefix").publisher(publish_timeout=0.5, batching=BATCH)
    futures = [publisher.publish(b"m%02d" % n) for n in range(20)]

    publisher.flush(timeout=30)
    ids, errors = _outcomes(futures)

    assert len(ids) == 8 and futures[7].exception() is None and futures[8].exception() is not None
    assert len(errors) == 12 and all(isinstance(e, WouldBlock) for e in errors)
    assert "published 8 of 20" in str(errors[0]) and "8 pending" in str(errors[0])
    assert topic.stats().published == 8

    seen = _drain_to_marker(topic, subscription)

    assert seen == [(message_id, b"m%02d" % n) for n, message_id in enumerate(ids)]
    assert topic.join(timeout=10)
    assert topic.stats().published == 9  # the prefix and the marker
    publisher.close(timeout=10)


def test_a_batch_held_by_a_full_blocking_group_publishes_its_prefix(
    bus: Bus, remote: RemoteBus,
) -> None:
    topic = bus.create_topic("full", balanced_capacity=4, balanced_on_full="block",
                             ack_timeout=None)
    topic.create_group("g")  # no member yet: its queue fills after 4
    publisher = remote.topic("full").publisher(publish_timeout=0.5, batching=BATCH)
    futures = [publisher.publish(b"m%02d" % n) for n in range(10)]

    publisher.flush(timeout=30)
    ids, errors = _outcomes(futures)

    assert len(ids) == 4 and len(errors) == 6
    assert all(isinstance(e, WouldBlock) for e in errors) and "'g' is full" in str(errors[0])
    seen = _drain_to_marker(topic, topic.subscription(group="g"))
    assert seen == [(message_id, b"m%02d" % n) for n, message_id in enumerate(ids)]
    publisher.close(timeout=10)


def test_a_batch_queued_behind_a_blocked_local_batch_is_cancelled_whole(
    bus: Bus, remote: RemoteBus,
) -> None:
    topic = bus.create_topic("queued", max_pending=2, ack_timeout=None)
    subscription = topic.subscription(group="g")
    # An in-process batch without a deadline: the topic's actor waits in it for a slot.
    local = topic._publish_batches([([b"local-%d" % n for n in range(4)], [{}] * 4, [None] * 4)])
    publisher = remote.topic("queued").publisher(publish_timeout=0.5, batching=BATCH)
    futures = [publisher.publish(b"m%02d" % n) for n in range(5)]

    publisher.flush(timeout=30)
    ids, errors = _outcomes(futures)

    assert ids == [] and len(errors) == 5
    assert all(isinstance(e, WouldBlock) for e in errors)
    assert "did not start on the batch" in str(errors[0])
    assert not local.done()  # still waiting, without a bound, as before

    seen = _drain_to_marker(topic, subscription)

    assert [data for _, data in seen] == [b"local-%d" % n for n in range(4)]
    assert local.result(10)[0][1] is None
    publisher.close(timeout=10)


def test_batches_without_backpressure_are_published_whole(bus: Bus, remote: RemoteBus) -> None:
    # Room for every message: the group's queue must not fill before the drain.
    topic = bus.create_topic("free", ack_timeout=None, balanced_capacity=1000)
    subscription = topic.subscription(group="g")
    publisher = remote.topic("free").publisher(
        batching=BatchSettings(max_messages=50, max_latency=60.0))
    futures = [publisher.publish(b"m%03d" % n) for n in range(150)]  # three batches of 50

    publisher.flush(timeout=30)
    ids, errors = _outcomes(futures)

    assert errors == [] and len(set(ids)) == 150
    seen = _drain_to_marker(topic, subscription)
    assert seen == [(message_id, b"m%03d" % n) for n, message_id in enumerate(ids)]
    publisher.close(timeout=10)


def test_the_servers_publish_timeout_caps_a_batchs_timeout(bus: Bus) -> None:
    topic = bus.create_topic("capped", max_pending=1, ack_timeout=None)
    topic.create_group("g")  # keeps the message pending
    topic._publish_batch([Message(data=b"held")]).result(10)
    with serve(bus, authkey=KEY, publish_timeout=0.3) as server, \
            RemoteBus(server.address, authkey=KEY) as remote:
        publisher = remote.topic("capped").publisher(publish_timeout=30.0, batching=BATCH)
        future = publisher.publish(b"late")
        started = time.monotonic()

        publisher.flush(timeout=30)

        assert isinstance(future.exception(timeout=10), WouldBlock)
        assert time.monotonic() - started < 10.0  # the server's 0.3 s, not the client's 30 s
        publisher.close(timeout=10)
    assert topic.stats().published == 1


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf")])
def test_a_publish_timeout_that_is_not_a_finite_number_above_0_is_refused(
    bus: Bus, remote: RemoteBus, value: float,
) -> None:
    bus.create_topic("orders")
    with pytest.raises(ValueError, match="publish_timeout"):
        remote.topic("orders").publisher(publish_timeout=value)


def test_the_wire_answer_names_each_message(server: BusServer, bus: Bus) -> None:
    topic = bus.create_topic("wire", max_pending=2, ack_timeout=None)
    topic.create_group("g")
    with Channel(server.address, KEY) as channel:
        ids, error = channel.call("publish_batch", "wire", [Message(data=b"%d" % n) for n in range(5)], 0.2)

    assert len(ids) == 2 and isinstance(error, WouldBlock)
    assert topic.stats().published == 2


def _fake_broker(answer: Any) -> tuple[Any, threading.Thread]:
    """A listener that passes the challenge and the limits call, then hands the first
    ``publish_batch`` request (its call id and args) to ``answer(connection, ...)``."""
    listener = Listener(("127.0.0.1", 0))

    def run() -> None:
        with listener.accept() as connection:
            authenticate_server(connection, KEY, 5.0)
            call_id, _ = unframed(connection.recv_bytes())  # "limits"
            connection.send_bytes(framed(call_id, ("ok", {"max_frame_size": 1 << 20})))
            call_id, body = unframed(connection.recv_bytes())
            answer(connection, call_id, pickle.loads(body))  # the test trusts its client
            try:
                while connection.poll(10.0):  # until the client closes
                    connection.recv_bytes()
            except (EOFError, OSError):
                return

    thread = threading.Thread(target=run)
    thread.start()
    return listener, thread


def _parts(count: int) -> list[Any]:
    return [([b"m%d" % n for n in range(count)], [{} for _ in range(count)], [None] * count)]


def test_an_answer_later_than_the_clients_timeout_is_still_taken() -> None:
    requests: list[Any] = []

    def answer(connection: Connection, call_id: int, request: Any) -> None:
        requests.append(request)
        time.sleep(0.4)  # sleep-ok: the broker's answer comes after the client's 0.2 s
        connection.send_bytes(framed(call_id, ("ok", (["7", "8"], WouldBlock("held")))))

    listener, thread = _fake_broker(answer)
    try:
        with Channel(listener.address, KEY) as channel:
            path = _BatchPath("t", channel, publish_timeout=0.2, grace=5.0)
            ((ids, error),) = path._publish_batches(_parts(3)).result(timeout=0)
    finally:
        thread.join(timeout=10)
        listener.close()

    assert requests[0][0] == "publish_batch" and requests[0][1][0] == "t"
    assert requests[0][1][2] == 0.2  # the client's timeout goes to the broker
    assert ids == ["7", "8"] and isinstance(error, WouldBlock)  # the broker's word, not a timeout


def test_no_answer_within_the_grace_fails_the_batch_as_unknown() -> None:
    listener, thread = _fake_broker(lambda connection, call_id, request: None)
    try:
        with Channel(listener.address, KEY) as channel:
            path = _BatchPath("t", channel, publish_timeout=0.1, grace=0.2)
            ((ids, error),) = path._publish_batches(_parts(3)).result(timeout=0)
            closed = channel.closed
    finally:
        thread.join(timeout=10)
        listener.close()

    assert ids is None and isinstance(error, BrokerTimeoutError)
    assert "no answer to a batch of 3 messages within 0.3" in str(error)
    assert "whether the broker published them is unknown" in str(error)
    assert closed  # dropped: a late answer cannot be mistaken for a later call's
