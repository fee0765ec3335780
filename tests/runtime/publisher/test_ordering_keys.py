"""Ordering keys: a batch per key, one in flight per key, pause on failure, resume."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic

from actors import ActorSystem
from runtime.core._message import Message
from runtime.errors import (
    OrderingKeyPausedError,
    PublishError,
    TopicClosedError,
)
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher

ONE_AT_A_TIME = BatchSettings(max_messages=1, max_latency=60.0)


def keys_and_data(topic: FakeTopic) -> list[list[tuple[str | None, bytes]]]:
    return [[(m.ordering_key, m.data) for m in batch] for batch in topic.batches]


def test_each_key_gets_its_own_batch(system: ActorSystem) -> None:
    topic = FakeTopic()
    settings = BatchSettings(max_latency=60.0)
    with Publisher(topic, system=system, batching=settings, message_ordering=True) as pub:
        for data, key in [(b"a1", "A"), (b"b1", "B"), (b"a2", "A"), (b"n1", None)]:
            pub.publish(data, ordering_key=key)
        pub.flush(timeout=5.0)

    assert sorted(keys_and_data(topic), key=str) == sorted(
        [[("A", b"a1"), ("A", b"a2")], [("B", b"b1")], [(None, b"n1")]], key=str
    )


def test_without_ordering_keys_share_one_batch(system: ActorSystem) -> None:
    topic = FakeTopic()
    with Publisher(topic, system=system, batching=BatchSettings(max_latency=60.0)) as pub:
        for data, key in [(b"a1", "A"), (b"b1", "B"), (b"a2", "A")]:
            pub.publish(data, ordering_key=key)
        pub.flush(timeout=5.0)

    assert keys_and_data(topic) == [[("A", b"a1"), ("B", b"b1"), ("A", b"a2")]]


def test_a_keys_batches_go_out_one_at_a_time_in_order(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    pub = Publisher(topic, system=system, batching=ONE_AT_A_TIME, message_ordering=True)
    futures = [pub.publish(b"a%d" % i, ordering_key="A") for i in range(3)]
    topic.wait_for_held(1)
    other = pub.publish(b"b0", ordering_key="B")  # another key is not held back
    topic.wait_for_held(2)
    pub.set_options()

    assert keys_and_data(topic) == [[("A", b"a0")], [("B", b"b0")]]
    topic.confirm()  # a0
    topic.wait_for_held(2)
    assert keys_and_data(topic)[2] == [("A", b"a1")]
    topic.confirm(2)  # b0, a1
    topic.wait_for_held(1)
    topic.confirm()
    pub.close(timeout=5.0)

    assert [f.result(timeout=0) for f in futures] == ["fake-1", "fake-3", "fake-4"]
    assert other.result(timeout=0) == "fake-2"
    assert [b[0].data for b in topic.batches if b[0].ordering_key == "A"] == [b"a0", b"a1", b"a2"]


def test_failed_key_pauses_until_resumed_while_others_carry_on(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    pub = Publisher(topic, system=system, batching=ONE_AT_A_TIME, message_ordering=True)
    failing = pub.publish(b"a0", ordering_key="A")
    queued = [pub.publish(b"a%d" % i, ordering_key="A") for i in (1, 2)]
    topic.wait_for_held(1)

    topic.fail(TopicClosedError("fake"))

    assert isinstance(failing.exception(timeout=5.0), TopicClosedError)
    for future in queued:
        error = future.exception(timeout=5.0)
        assert isinstance(error, OrderingKeyPausedError) and error.code == 9
    assert pub.paused_keys() == ["A"]
    with pytest.raises(OrderingKeyPausedError) as caught:
        pub.publish(b"a3", ordering_key="A")
    assert str(caught.value) == "Publishing paused for ordering key: A"
    assert caught.value.code == 9
    other = pub.publish(b"b0", ordering_key="B")
    topic.wait_for_held(1)
    topic.confirm()
    assert other.result(timeout=5.0) == "fake-1"
    assert pub.outstanding == (0, 0)

    pub.resume_publish("C")  # not paused: a no-op
    pub.resume_publish("A")
    assert pub.paused_keys() == []
    resumed = pub.publish(b"a4", ordering_key="A")
    topic.wait_for_held(1)
    topic.confirm()
    assert resumed.result(timeout=5.0) == "fake-2"
    pub.close(timeout=5.0)
    assert [b[0].data for b in topic.batches] == [b"a0", b"b0", b"a4"]


def test_pause_fails_the_keys_open_batch_too(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    settings = BatchSettings(max_messages=2, max_latency=60.0)
    pub = Publisher(topic, system=system, batching=settings, message_ordering=True)
    sent = [pub.publish(b"a%d" % i, ordering_key="A") for i in range(2)]
    topic.wait_for_held(1)
    still_open = pub.publish(b"a2", ordering_key="A")
    pub.set_options()

    topic.fail(TopicClosedError("fake"))

    assert all(isinstance(f.exception(timeout=5.0), TopicClosedError) for f in sent)
    assert isinstance(still_open.exception(timeout=5.0), OrderingKeyPausedError)
    assert pub.outstanding == (0, 0)
    pub.close(timeout=5.0)
    assert len(topic.batches) == 1


def test_empty_and_none_keys_mean_no_key(system: ActorSystem) -> None:
    topic = FakeTopic()
    settings = BatchSettings(max_latency=60.0)
    with Publisher(topic, system=system, batching=settings, message_ordering=True) as pub:
        pub.publish(b"1", ordering_key="")
        pub.publish(b"2", ordering_key=None)
        pub.resume_publish("")
        pub.flush(timeout=5.0)

    assert keys_and_data(topic) == [[(None, b"1"), (None, b"2")]]


def test_many_keys_share_one_ticker_thread(system: ActorSystem) -> None:
    topic = FakeTopic()
    settings = BatchSettings(max_latency=0.02)
    with Publisher(topic, system=system, batching=settings, message_ordering=True) as pub:
        threads_before = threading.active_count()
        futures = [pub.publish(b"x", ordering_key=f"k{i}") for i in range(50)]
        threads_during = threading.active_count()
        ids = [f.result(timeout=5.0) for f in futures]

    assert threads_during == threads_before
    assert len(set(ids)) == 50
    assert sorted(len(b) for b in topic.batches) == [1] * 50


def test_keys_are_checked_alike_with_and_without_flow_control(system: ActorSystem) -> None:
    # publish() takes short str keys in a fast path; longer ones are measured in bytes.
    clef = "\U0001d11e"  # 4 bytes in UTF-8: 256 of them are exactly the 1024-byte limit
    for limits in (FlowControl(), FlowControl(max_outstanding_messages=100)):
        topic = FakeTopic()
        settings = BatchSettings(max_latency=60.0)
        with Publisher(topic, system=system, batching=settings, message_ordering=True,
                       flow_control=limits) as pub:
            accepted = [clef * 256, "k" * 1024, "", "A"]
            futures = [pub.publish(b"%d" % n, ordering_key=key) for n, key in enumerate(accepted)]
            with pytest.raises(PublishError) as too_long:
                pub.publish(b"x", ordering_key=clef * 257)
            with pytest.raises(TypeError) as not_str:
                pub.publish(b"x", ordering_key=7)  # type: ignore[arg-type]
            assert pub.outstanding[0] == 4
            pub.flush(timeout=5.0)

        assert too_long.value.code == 3
        assert isinstance(not_str.value, PublishError) and not_str.value.code == 3
        assert [f.result(timeout=0) for f in futures] == ["fake-1", "fake-2", "fake-3", "fake-4"]
        assert sorted(keys_and_data(topic), key=str) == sorted(
            [[(clef * 256, b"0")], [("k" * 1024, b"1")], [(None, b"2")], [("A", b"3")]], key=str,
        )


def test_a_paused_key_is_refused_under_flow_control_too(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    pub = Publisher(topic, system=system, batching=ONE_AT_A_TIME, message_ordering=True,
                    flow_control=FlowControl(max_outstanding_messages=10))
    failing = pub.publish(b"a0", ordering_key="A")
    topic.wait_for_held(1)
    topic.fail(TopicClosedError("fake"))
    assert isinstance(failing.exception(timeout=5.0), TopicClosedError)

    with pytest.raises(OrderingKeyPausedError):
        pub.publish(b"a1", ordering_key="A")
    other = pub.publish(b"b0", ordering_key="B")
    topic.wait_for_held(1)
    topic.confirm()
    assert other.result(timeout=5.0) == "fake-1"
    assert pub.outstanding == (0, 0)
    pub.close(timeout=5.0)


class _GatedTopic(FakeTopic):
    """Blocks the Publisher actor inside each send of a batch ``blocks`` picks (by default
    every one) until the test sets ``gate``; ``hold`` as `FakeTopic`'s."""

    def __init__(self, blocks: Callable[[list[Message]], bool] = lambda _: True, *,
                 hold: bool = False) -> None:
        super().__init__(hold=hold)
        self.blocks = blocks
        self.entered = threading.Event()
        self.gate = threading.Event()

    def _publish_batch(self, messages: list[Message]) -> Future[list[str]]:
        if self.blocks(messages):
            self.entered.set()
            if not self.gate.wait(10.0):
                raise AssertionError("the test never opened the gate")
        return super()._publish_batch(messages)


@pytest.mark.parametrize("per_key", [3, 30])
def test_a_burst_over_many_keys_is_cut_into_per_key_batches_in_order(
    system: ActorSystem, per_key: int,
) -> None:
    # The actor is held inside its first send while 16 keys' messages pile up in the
    # intake, so it takes them in one drain and splits them by key.
    topic = _GatedTopic()
    keys = [f"k{n}" for n in range(16)]
    with Publisher(topic, system=system, batching=BatchSettings(max_messages=5, max_latency=60.0),
                   message_ordering=True) as pub:
        first = [pub.publish(b"w%d" % n, ordering_key="warm") for n in range(5)]
        assert topic.entered.wait(5.0)
        burst = [(pub.publish(b"%s-%d" % (key.encode(), n), ordering_key=key), key, n)
                 for n in range(per_key) for key in keys]
        topic.gate.set()
        pub.flush(timeout=10.0)

    assert [f.result(timeout=0) for f in first] == [f"fake-{n}" for n in range(1, 6)]
    batches = keys_and_data(topic)[1:]
    assert all(len({key for key, _ in batch}) == 1 for batch in batches)
    assert [len(batch) for batch in batches] == sorted(
        [5] * (16 * (per_key // 5)) + [per_key % 5] * (16 if per_key % 5 else 0), reverse=True)
    for key in keys:  # each key's messages in publish order, cut every 5
        datas = [data for batch in batches if batch[0][0] == key for _, data in batch]
        assert datas == [b"%s-%d" % (key.encode(), n) for n in range(per_key)]
    ids = {f"fake-{n}" for n in range(6, 6 + 16 * per_key)}
    assert {future.result(timeout=0) for future, _, _ in burst} == ids
    for key in keys:  # a key's ids ascend in publish order (its batches go out in order)
        own = [int(f.result(timeout=0).split("-")[1]) for f, k, _ in burst if k == key]
        assert own == sorted(own)


def test_a_burst_whose_futures_nobody_holds_is_cut_alike(system: ActorSystem) -> None:
    # Fire and forget: no future of the burst is held when the actor takes it, so the
    # lanes still carry each future with its message.
    topic = _GatedTopic()
    keys = [f"k{n}" for n in range(16)]
    per_key = 30
    with Publisher(topic, system=system, batching=BatchSettings(max_messages=5, max_latency=60.0),
                   message_ordering=True) as pub:
        for n in range(5):  # a full batch: the actor waits inside its send
            pub.publish(b"w%d" % n, ordering_key="warm")
        assert topic.entered.wait(5.0)
        for n in range(per_key):
            for key in keys:
                pub.publish(b"%s-%d" % (key.encode(), n), ordering_key=key)
        topic.gate.set()
        pub.flush(timeout=10.0)
        assert pub.outstanding == (0, 0)

    batches = keys_and_data(topic)[1:]
    assert all(len({key for key, _ in batch}) == 1 for batch in batches)
    assert sum(map(len, batches)) == 16 * per_key
    for key in keys:  # each key's messages in publish order, cut every 5
        datas = [data for batch in batches if batch[0][0] == key for _, data in batch]
        assert datas == [b"%s-%d" % (key.encode(), n) for n in range(per_key)]
        sizes = [len(b) for b in batches if b[0][0] == key]
        assert sizes == [5] * (per_key // 5) + ([per_key % 5] if per_key % 5 else [])


@pytest.mark.parametrize("per_key", [2, 30])
def test_messages_queued_for_a_key_that_pauses_meanwhile_fail_and_free_their_capacity(
    system: ActorSystem, per_key: int,
) -> None:
    # Key A's batch fails while A's next messages wait in the intake, taken only after
    # the actor learned of the failure: they fail with OrderingKeyPausedError and free
    # their flow-control capacity; key C carries on.
    topic = _GatedTopic(lambda messages: messages[0].ordering_key == "B", hold=True)
    pub = Publisher(topic, system=system, batching=BatchSettings(max_latency=0),
                    message_ordering=True, flow_control=FlowControl(max_outstanding_messages=1000))
    failing = pub.publish(b"a0", ordering_key="A")
    topic.wait_for_held(1)
    blocker = pub.publish(b"b0", ordering_key="B")
    assert topic.entered.wait(5.0)  # the actor is inside B's send
    topic.fail(TopicClosedError("fake"))  # A's batch fails: the actor hears of it next
    queued = [pub.publish(b"a%d" % n, ordering_key="A") for n in range(1, per_key + 1)]
    others = [pub.publish(b"c%d" % n, ordering_key="C") for n in range(per_key)]
    topic.gate.set()

    assert isinstance(failing.exception(timeout=5.0), TopicClosedError)
    for future in queued:
        assert isinstance(future.exception(timeout=5.0), OrderingKeyPausedError)
    for _ in range(1 + per_key):  # B's batch, then C's, one in flight per key
        topic.wait_for_held(1)
        topic.confirm()
    assert blocker.result(timeout=5.0) == "fake-1"
    assert [f.result(timeout=5.0) for f in others] == [f"fake-{n}" for n in range(2, per_key + 2)]
    assert [[m.data for m in batch] for batch in topic.batches if batch[0].ordering_key != "B"] \
        == [[b"a0"]] + [[b"c%d" % n] for n in range(per_key)]
    assert pub.paused_keys() == ["A"]
    assert pub.outstanding == (0, 0)
    pub.close(timeout=5.0)
