"""Flow control in the Publisher: admission, progress, errors, release exactly once."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic

from actors import ActorSystem
from runtime.errors import FlowControlError, TopicClosedError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher

LONG_BATCHES = BatchSettings(max_messages=100, max_latency=60.0)


def publish_in_thread(
    pub: Publisher, data: bytes
) -> tuple[threading.Thread, Future[Future[str]]]:
    """Publish from another thread; the outer future resolves once publish returned."""
    outcome: Future[Future[str]] = Future()

    def run() -> None:
        try:
            outcome.set_result(pub.publish(data))
        except BaseException as exc:
            outcome.set_exception(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_single_thread_is_not_deadlocked_by_its_own_pending_batch(system: ActorSystem) -> None:
    topic = FakeTopic()
    flow = FlowControl(max_outstanding_messages=10)
    with Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow) as pub:
        first = [pub.publish(b"%d" % i) for i in range(10)]

        eleventh = pub.publish(b"10")  # blocks: the actor sends the pending 10 first

        assert all(f.done() for f in first)
        pub.flush(timeout=5.0)
        assert eleventh.result(timeout=0) == "fake-11"

    assert [len(b) for b in topic.batches] == [10, 1]


def test_blocked_publish_is_admitted_only_after_a_confirmation(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_bytes=100)
    pub = Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow)
    first = [pub.publish(b"x" * 50) for _ in range(2)]

    thread, blocked = publish_in_thread(pub, b"y" * 10)
    topic.wait_for_held(1)  # blocking made the actor send the pending batch

    assert not blocked.done()
    assert pub.outstanding == (2, 100)
    topic.confirm()
    admitted = blocked.result(timeout=5.0)
    thread.join(timeout=5.0)
    topic_confirm_on_send(topic, pub)

    assert [f.result(timeout=0) for f in first] == ["fake-1", "fake-2"]
    assert admitted.result(timeout=0) == "fake-3"


def test_error_behaviour_fails_at_once(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=2, max_outstanding_bytes=1000,
                       limit_exceeded="error")
    pub = Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow)
    pub.publish(b"x" * 600)

    with pytest.raises(FlowControlError) as by_bytes:
        pub.publish(b"x" * 401)
    pub.publish(b"x" * 400)
    with pytest.raises(FlowControlError) as by_count:
        pub.publish(b"")

    assert (by_bytes.value.code, str(by_bytes.value)) == (
        8, "Flow control: max outstanding bytes exceeded")
    assert (by_count.value.code, str(by_count.value)) == (
        8, "Flow control: max outstanding messages exceeded")
    assert pub.outstanding == (2, 1000)
    topic_confirm_on_send(topic, pub)


def topic_confirm_on_send(topic: FakeTopic, pub: Publisher) -> None:
    """Confirm everything ``pub`` sent or will send, then close it."""
    topic.stop_holding()
    pub.close(timeout=5.0)
    assert pub.outstanding == (0, 0)


def test_block_timeout_expiry_raises_flow_control_error(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=1, block_timeout=0.05)
    pub = Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow)
    pub.publish(b"1")

    with pytest.raises(FlowControlError, match="messages exceeded") as caught:
        pub.publish(b"2")

    assert caught.value.code == 8
    assert pub.outstanding == (1, 1)
    topic_confirm_on_send(topic, pub)


def test_message_larger_than_the_byte_limit_fails_at_once(system: ActorSystem) -> None:
    topic = FakeTopic()
    flow = FlowControl(max_outstanding_bytes=100)
    with Publisher(topic, system=system, flow_control=flow) as pub:
        with pytest.raises(FlowControlError, match="bytes exceeded"):
            pub.publish(b"x" * 101)

        assert pub.publish(b"x" * 100).result(timeout=5.0) == "fake-1"


def test_ignore_never_blocks(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=1, max_outstanding_bytes=1,
                       limit_exceeded="ignore")
    pub = Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow)

    futures = [pub.publish(b"xx") for _ in range(5)]

    assert pub.outstanding == (5, 10)
    topic_confirm_on_send(topic, pub)
    assert [f.result(timeout=0) for f in futures] == [f"fake-{i}" for i in range(1, 6)]


def test_waiters_are_admitted_first_come_first_served(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=1)
    pub = Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow)
    pub.publish(b"0")
    waiters = []
    for i in (1, 2, 3):
        waiters.append(publish_in_thread(pub, b"%d" % i))
        while pub._gate.waiting < i:  # each thread is queued before the next starts
            threading.Event().wait(0.005)

    for _ in range(3):
        topic.wait_for_held(1)  # each admitted waiter blocks no more: close sends the last
        topic.confirm()
    for thread, _ in waiters:
        thread.join(timeout=5.0)
    topic_confirm_on_send(topic, pub)

    assert [b[0].data for b in topic.batches] == [b"0", b"1", b"2", b"3"]
    ids = [outcome.result(timeout=0).result(timeout=0) for _, outcome in waiters]
    assert ids == ["fake-2", "fake-3", "fake-4"]


def test_growing_limits_wake_waiters(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=1)
    pub = Publisher(topic, system=system, batching=LONG_BATCHES, flow_control=flow)
    pub.publish(b"0")
    thread, blocked = publish_in_thread(pub, b"1")
    topic.wait_for_held(1)

    pub.set_options(flow_control={"max_outstanding_messages": 2})

    while pub.outstanding[0] < 2:  # admitted without any confirmation
        threading.Event().wait(0.005)
    assert len(topic.held) == 1
    thread.join(timeout=5.0)
    topic_confirm_on_send(topic, pub)
    assert blocked.result(timeout=0).result(timeout=0) == "fake-2"


def test_capacity_is_released_once_on_failure_and_pause(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=10, max_outstanding_bytes=1000)
    batches = BatchSettings(max_messages=2, max_latency=60.0)
    pub = Publisher(topic, system=system, batching=batches, flow_control=flow,
                    message_ordering=True)
    for i in range(5):
        pub.publish(b"a%d" % i, ordering_key="A")  # a0+a1 sent; a2+a3 queued; a4 open
    pub.publish(b"n", ordering_key=None)
    topic.wait_for_held(1)
    assert pub.outstanding == (6, 11)

    topic.fail(TopicClosedError("fake"))
    pub.set_options()

    assert pub.outstanding == (1, 1)
    topic_confirm_on_send(topic, pub)


def test_a_blocked_publish_leaves_an_open_batch_filling_while_more_is_in_flight(
    system: ActorSystem,
) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=40)
    pub = Publisher(topic, system=system, batching=BatchSettings(max_messages=30, max_latency=60.0),
                    flow_control=flow, message_ordering=True)
    for number in range(30):
        pub.publish(b"a%d" % number, ordering_key="a")  # a full batch: sent and held
    topic.wait_for_held(1)
    for number in range(10):
        pub.publish(b"b%d" % number, ordering_key="b")  # open: 40 outstanding now
    blocked: Future[Future[str]] = Future()
    thread = threading.Thread(
        target=lambda: blocked.set_result(pub.publish(b"b10", ordering_key="b")))
    thread.start()
    _wait_for_a_blocked_publish(pub)

    topic.confirm()  # the 30 in flight free the room; "b" was not cut into a sliver
    admitted = blocked.result(timeout=5.0)
    thread.join(timeout=5.0)
    topic_confirm_on_send(topic, pub)

    assert admitted.result(timeout=0) == "fake-41"
    assert [len(batch) for batch in topic.batches] == [30, 11]


def _wait_for_a_blocked_publish(pub: Publisher) -> None:
    event = threading.Event()
    for _ in range(500):
        if pub._gate.waiting:
            return
        event.wait(0.01)
    raise AssertionError("the publish never blocked")
