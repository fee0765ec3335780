"""The Publisher actor: batching thresholds, ids, atomic batches.

Batch composition is asserted through what the (fake) topic receives.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, wait

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime.errors import TopicClosedError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher


@pytest.fixture
def topic() -> FakeTopic:
    return FakeTopic()


def test_defaults_publish_fifty_messages_with_distinct_ids(
    system: ActorSystem, topic: FakeTopic
) -> None:
    with Publisher(topic, system=system) as pub:
        assert pub.batching == BatchSettings(max_messages=100, max_bytes=1 << 20,
                                             max_latency=0.010)
        assert pub.flow_control == FlowControl()
        assert pub.message_ordering is False

        futures = [pub.publish(b"m%d" % i) for i in range(50)]
        ids = [f.result(timeout=5.0) for f in futures]

    assert len(set(ids)) == 50 and all(isinstance(i, str) for i in ids)
    sent = [m.data for batch in topic.batches for m in batch]
    assert sent == [b"m%d" % i for i in range(50)]
    assert all(len(batch) <= 100 for batch in topic.batches)


def test_nth_message_sends_the_batch_at_once_and_the_next_starts_another(
    system: ActorSystem, topic: FakeTopic
) -> None:
    with Publisher(topic, system=system, batching=batching(max_messages=10)) as pub:
        started = time.monotonic()
        first = [pub.publish(b"%d" % i) for i in range(10)]
        wait(first, timeout=5.0)
        elapsed = time.monotonic() - started
        eleventh = pub.publish(b"10")
        pub.flush(timeout=5.0)

    assert elapsed < 2.0 and all(f.done() for f in first)
    assert topic.datas() == [[b"%d" % i for i in range(10)], [b"10"]]
    assert eleventh.result(timeout=0) == "fake-11"


def test_latency_sends_a_partial_batch_about_max_latency_after_its_first_message(
    system: ActorSystem, topic: FakeTopic
) -> None:
    settings = BatchSettings(max_messages=1000, max_latency=0.020)
    with Publisher(topic, system=system, batching=settings) as pub:
        started = time.monotonic()
        futures = [pub.publish(b"%d" % i) for i in range(5)]
        topic.wait_for_batches(1)
        wait(futures, timeout=5.0)

    assert topic.datas() == [[b"0", b"1", b"2", b"3", b"4"]]
    assert 0.015 <= topic.received_at[0] - started < 1.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_latency_follows_the_injected_clock(system: ActorSystem, topic: FakeTopic) -> None:
    clock = FakeClock()
    settings = BatchSettings(max_messages=1000, max_latency=0.020)
    with Publisher(topic, system=system, batching=settings, clock=clock) as pub:
        futures = [pub.publish(b"%d" % i) for i in range(5)]
        pub.set_options()  # a round trip: the actor has seen every publish at time 0
        clock.now = 0.019
        pub.set_options()
        assert topic.batches == []

        clock.now = 0.020
        topic.wait_for_batches(1)
        wait(futures, timeout=5.0)

    assert topic.datas() == [[b"0", b"1", b"2", b"3", b"4"]]


def test_max_bytes_splits_batches_exactly(system: ActorSystem, topic: FakeTopic) -> None:
    with Publisher(topic, system=system, batching=batching(max_bytes=1024)) as pub:
        for _ in range(3):
            pub.publish(b"a" * 512)
        topic.wait_for_batches(1)
        pub.flush(timeout=5.0)
        pub.publish(b"b" * 600)
        pub.publish(b"c" * 500)  # would exceed: the 600-byte batch goes first
        topic.wait_for_batches(3)
        pub.publish(b"d" * 5000)  # above max_bytes: goes alone, at once
        topic.wait_for_batches(5)

    sizes = [[len(d) for d in batch] for batch in topic.datas()]
    assert sizes == [[512, 512], [512], [600], [500], [5000]]


def test_minimal_thresholds_send_every_publish_on_its_own(
    system: ActorSystem, topic: FakeTopic
) -> None:
    settings = BatchSettings(max_messages=1, max_bytes=1, max_latency=0)
    with Publisher(topic, system=system, batching=settings) as pub:
        for i in range(5):
            pub.publish(b"%d" % i).result(timeout=5.0)
            assert len(topic.batches) == i + 1

    assert topic.datas() == [[b"0"], [b"1"], [b"2"], [b"3"], [b"4"]]


def test_futures_resolve_in_publish_order_with_the_batch_ids(
    system: ActorSystem, topic: FakeTopic
) -> None:
    order: list[int] = []
    with Publisher(topic, system=system, batching=batching(max_messages=20)) as pub:
        futures = [pub.publish(b"%d" % i) for i in range(20)]
        for i, future in enumerate(futures):
            future.add_done_callback(lambda _, i=i: order.append(i))
        ids = [f.result(timeout=5.0) for f in futures]

    assert len(topic.batches) == 1
    assert ids == [f"fake-{i}" for i in range(1, 21)]
    assert order == list(range(20))


def test_concurrent_publishes_from_eight_threads_get_unique_ids(
    system: ActorSystem, topic: FakeTopic
) -> None:
    results: list[Future[str]] = []
    lock = threading.Lock()

    def publish_some(pub: Publisher, thread: int) -> None:
        for i in range(13 if thread < 4 else 12):
            future = pub.publish(b"t%d-%d" % (thread, i))
            with lock:
                results.append(future)

    with Publisher(topic, system=system, batching=batching(max_messages=7)) as pub:
        threads = [threading.Thread(target=publish_some, args=(pub, t)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10.0)
        pub.flush(timeout=5.0)

    ids = [f.result(timeout=0) for f in results]
    assert len(ids) == 100 and len(set(ids)) == 100
    assert sorted(m.data for b in topic.batches for m in b) == sorted(
        b"t%d-%d" % (t, i) for t in range(8) for i in range(13 if t < 4 else 12)
    )


def test_failing_topic_fails_every_future_of_the_batch(system: ActorSystem) -> None:
    topic = FakeTopic()
    topic.fail_with = TopicClosedError("fake")
    with Publisher(topic, system=system, batching=batching(max_messages=4)) as pub:
        futures = [pub.publish(b"%d" % i) for i in range(6)]
        pub.flush(timeout=5.0)  # never raises for per-message failures

        assert all(f.done() for f in futures)
        assert pub.outstanding == (0, 0)

    assert [len(b) for b in topic.batches] == [4, 2]
    for future in futures:
        assert isinstance(future.exception(timeout=0), TopicClosedError)
