"""The Publisher's lifecycle: flush, validation, set_options, close, errors."""

from __future__ import annotations

import pickle
import threading
import time
from concurrent.futures import Future

import pytest
from support.publisher import LONG, FakeTopic, batching

from actors import ActorSystem
from runtime.core._message import Message
from runtime.errors import FlowControlError, OrderingKeyPausedError, PublishError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher


@pytest.fixture
def topic() -> FakeTopic:
    return FakeTopic()


def test_flush_sends_pending_batches_at_once(system: ActorSystem, topic: FakeTopic) -> None:
    settings = BatchSettings(max_latency=5.0)
    with Publisher(topic, system=system, batching=settings) as pub:
        futures = [pub.publish(b"%d" % i) for i in range(3)]
        started = time.monotonic()
        pub.flush()
        elapsed = time.monotonic() - started

        assert elapsed < 1.0
        assert all(f.done() for f in futures)
        assert topic.datas() == [[b"0", b"1", b"2"]]


def test_flush_waits_for_confirmation_and_times_out(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    with Publisher(topic, system=system, batching=batching()) as pub:
        future = pub.publish(b"x")

        with pytest.raises(TimeoutError):
            pub.flush(timeout=0.05)
        topic.confirm()
        pub.flush(timeout=5.0)

        assert future.result(timeout=0) == "fake-1"


def test_flush_with_nothing_pending_returns_at_once(
    system: ActorSystem, topic: FakeTopic
) -> None:
    with Publisher(topic, system=system) as pub:
        started = time.monotonic()
        pub.flush()
        pub.flush(timeout=0)

        assert time.monotonic() - started < 0.5


def test_flush_ends_while_another_thread_keeps_publishing(
    system: ActorSystem, topic: FakeTopic
) -> None:
    stop = threading.Event()

    def keep_publishing(pub: Publisher) -> None:
        while not stop.is_set():
            pub.publish(b"more")

    with Publisher(topic, system=system, batching=batching(max_messages=50)) as pub:
        before = pub.publish(b"before")
        publisher_thread = threading.Thread(target=keep_publishing, args=(pub,))
        publisher_thread.start()
        try:
            pub.flush(timeout=10.0)
            assert before.done()
        finally:
            stop.set()
            publisher_thread.join(timeout=10.0)


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (lambda p: p.publish("text"), "Message data must be bytes"),
        (lambda p: p.publish(123), "Message data must be bytes"),
        (lambda p: p.publish(b"x" * (10 * 1024 * 1024 + 1)), "Message size exceeds maximum of 10MB"),
        (lambda p: p.publish(b"x" * (10 * 1024 * 1024 - 2), {"k": "vv"}),
         "Message size exceeds maximum of 10MB"),
        (lambda p: p.publish(b"x", {"k": 1}), "must be str"),
        (lambda p: p.publish(b"x", {2: "v"}), "must be str"),
        (lambda p: p.publish(b"x", ordering_key="k" * 1025), "Ordering key exceeds"),
        (lambda p: p.publish(b"x", ordering_key=7), "Ordering key must be a str"),
        (lambda p: p.publish_message(Message(data="s")),  # type: ignore[arg-type]
         "Message data must be bytes"),
        (lambda p: p.publish_message(b"raw"), "takes a Message"),
    ],
)
def test_invalid_publish_raises_code_3_and_enqueues_nothing(
    system: ActorSystem, topic: FakeTopic, call: object, text: str
) -> None:
    with Publisher(topic, system=system, batching=batching()) as pub:
        with pytest.raises(PublishError) as caught:
            call(pub)  # type: ignore[operator]

        assert caught.value.code == 3
        assert text in str(caught.value)
        assert pub.outstanding == (0, 0)
        pub.flush(timeout=5.0)

    assert topic.batches == []


def test_exactly_ten_mib_is_accepted(system: ActorSystem, topic: FakeTopic) -> None:
    with Publisher(topic, system=system) as pub:
        message_id = pub.publish(b"x" * (10 * 1024 * 1024)).result(timeout=5.0)

    assert message_id == "fake-1"


def test_bytes_like_data_and_publish_message_are_accepted(
    system: ActorSystem, topic: FakeTopic
) -> None:
    attributes = {"k": "v"}
    with Publisher(topic, system=system, batching=batching()) as pub:
        pub.publish(bytearray(b"ba"), attributes)
        pub.publish_message(Message(data=b"mm", attributes=attributes, ordering_key="key"))
        attributes["k"] = "changed later"
        pub.flush(timeout=5.0)

    sent = topic.batches[0]
    assert [(m.data, m.attributes, m.ordering_key) for m in sent] == [
        (b"ba", {"k": "v"}, None), (b"mm", {"k": "v"}, "key")
    ]


def test_set_options_merges_and_invalid_values_change_nothing(
    system: ActorSystem, topic: FakeTopic
) -> None:
    with Publisher(topic, system=system, batching=batching(max_bytes=5000)) as pub:
        pub.set_options(batching={"max_messages": 3})
        pub.set_options(flow_control={"max_outstanding_messages": 50})
        for bad in [{"batching": {"max_messages": 0}}, {"batching": {"nope": 1}},
                    {"flow_control": {"limit_exceeded": "drop"}},
                    {"message_ordering": "yes"}, {"batching": 5}]:
            with pytest.raises(PublishError) as caught:
                pub.set_options(**bad)  # type: ignore[arg-type]
            assert caught.value.code == 3

        assert pub.batching == BatchSettings(max_messages=3, max_bytes=5000, max_latency=LONG)
        assert pub.flow_control == FlowControl(max_outstanding_messages=50)
        assert pub.message_ordering is False
        for i in range(3):
            pub.publish(b"%d" % i)
        topic.wait_for_batches(1)

    assert topic.datas() == [[b"0", b"1", b"2"]]


def test_set_options_sends_batches_that_now_reach_a_threshold(
    system: ActorSystem, topic: FakeTopic
) -> None:
    with Publisher(topic, system=system, batching=batching()) as pub:
        for i in range(4):
            pub.publish(b"%d" % i)

        pub.set_options(batching=batching(max_messages=2))
        topic.wait_for_batches(1)

        assert topic.datas() == [[b"0", b"1", b"2", b"3"]]


def test_close_flushes_then_refuses_publishes(system: ActorSystem, topic: FakeTopic) -> None:
    pub = Publisher(topic, system=system, batching=batching())
    future = pub.publish(b"last")

    pub.close()
    pub.close()  # a no-op

    assert future.result(timeout=0) == "fake-1"
    assert pub.closed
    with pytest.raises(PublishError) as caught:
        pub.publish(b"late")
    assert (caught.value.code, str(caught.value)) == (9, "Publisher is closed")
    with pytest.raises(PublishError, match="Publisher is closed"):
        pub.set_options(batching={"max_messages": 2})
    pub.flush(timeout=1.0)
    assert topic.datas() == [[b"last"]]


def test_close_wakes_publishers_blocked_in_flow_control(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=1)
    pub = Publisher(topic, system=system, batching=batching(), flow_control=flow)
    first = pub.publish(b"1")
    blocked: Future[None] = Future()

    def publish_blocked() -> None:
        try:
            pub.publish(b"2")
        except BaseException as exc:
            blocked.set_exception(exc)
        else:
            blocked.set_result(None)

    thread = threading.Thread(target=publish_blocked)
    thread.start()
    topic.wait_for_held(1)  # the blocked publish made the actor send the first batch
    closer = threading.Thread(target=pub.close, kwargs={"timeout": 5.0})
    closer.start()

    with pytest.raises(PublishError, match="Publisher is closed") as caught:
        blocked.result(timeout=5.0)
    topic.confirm()
    closer.join(timeout=5.0)
    thread.join(timeout=5.0)

    assert caught.value.code == 9
    assert first.result(timeout=0) == "fake-1"
    assert pub.outstanding == (0, 0)


def test_close_timeout_fails_what_is_left_and_stops(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    pub = Publisher(topic, system=system, batching=batching())
    future = pub.publish(b"stuck")

    with pytest.raises(TimeoutError):
        pub.close(timeout=0.05)

    with pytest.raises(PublishError, match="Publisher is closed"):
        future.result(timeout=5.0)
    assert pub.outstanding == (0, 0)


@pytest.mark.parametrize(
    "error",
    [PublishError("Publisher is closed", 9), FlowControlError(),
     FlowControlError("Flow control: max outstanding bytes exceeded"),
     OrderingKeyPausedError("user-1")],
)
def test_publisher_errors_pickle_with_their_code(error: PublishError) -> None:
    restored = pickle.loads(pickle.dumps(error))

    assert type(restored) is type(error)
    assert (restored.code, str(restored)) == (error.code, str(error))
