"""Runs: a Publisher sends the batches one mail made ready to a topic in one call
(`Topic._publish_batches`), and settles each from the one future."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from support.publisher import batching

from actors import ActorSystem
from runtime import Bus
from runtime.core._topic_actor import BatchOutcome
from runtime.errors import OrderingKeyPausedError, TopicClosedError
from runtime.publisher._actor import RUN
from runtime.publisher._flow_control import FlowControl, FlowGate
from runtime.publisher._publisher import Publisher

Parts = list[tuple[list[bytes], list[dict[str, str]], list[str | None]]]


class RunTopic:
    """A topic's batch seam: records each run, resolves its future when the test says so."""

    def __init__(self, *, raises: BaseException | None = None) -> None:
        self.name = "runs"
        self.raises = raises
        self.runs: list[tuple[Parts, Callable[[list[BatchOutcome]], None]]] = []
        self.arrived = threading.Event()

    def _publish_batches(self, parts: Parts) -> Future[list[BatchOutcome]]:
        if self.raises is not None:
            raise self.raises
        future: Future[list[BatchOutcome]] = Future()
        self.runs.append((parts, future.set_result))
        self.arrived.set()
        return future


def _flushing_three_keys(
    system: ActorSystem,
) -> tuple[RunTopic, Publisher, list[Future[str]], threading.Thread]:
    """A keyed Publisher with three open batches (two messages with key a, one with b,
    two with c), flushing in a thread once its run reached the topic."""
    topic = RunTopic()
    publisher = Publisher(topic, system=system, batching=batching(max_messages=100),
                          message_ordering=True)
    futures = [publisher.publish(data, ordering_key=key) for data, key in [
        (b"a1", "a"), (b"b1", "b"), (b"a2", "a"), (b"c1", "c"), (b"c2", "c")]]
    flushed = threading.Thread(target=publisher.flush, args=(10.0,))
    flushed.start()
    assert topic.arrived.wait(10.0)
    return topic, publisher, futures, flushed


def test_the_batches_one_mail_closes_go_as_one_run_and_settle_from_one_reply(
    system: ActorSystem,
) -> None:
    topic, publisher, futures, flushed = _flushing_three_keys(system)

    [(parts, reply)] = topic.runs  # the flush closed all three: one message
    assert [datas for datas, _, _ in parts] == [[b"a1", b"a2"], [b"b1"], [b"c1", b"c2"]]
    assert [keys for _, _, keys in parts] == [["a", "a"], ["b"], ["c", "c"]]
    reply([(["1", "2"], None), (["3"], None), (["4", "5"], None)])
    flushed.join(10.0)

    assert [f.result(10.0) for f in futures] == ["1", "3", "2", "4", "5"]
    assert not flushed.is_alive() and publisher.outstanding == (0, 0)
    publisher.close(10.0)


def test_a_run_accepted_in_part_settles_each_batch_for_its_own_part(system: ActorSystem) -> None:
    topic, publisher, futures, flushed = _flushing_three_keys(system)
    closed = TopicClosedError("runs")

    topic.runs[0][1]([(["1", "2"], None), (["3"], None), (["4"], closed)])
    flushed.join(10.0)

    assert [f.result(10.0) for f in futures[:4]] == ["1", "3", "2", "4"]
    assert futures[4].exception(10.0) is closed
    with pytest.raises(OrderingKeyPausedError):  # a failed batch pauses its key
        publisher.publish(b"c3", ordering_key="c")
    publisher.close(10.0)


def test_each_batch_of_a_run_releases_its_own_flow_control(
    system: ActorSystem, monkeypatch: pytest.MonkeyPatch,
) -> None:
    releases: list[tuple[int, int]] = []
    release = FlowGate.release

    def counted(gate: FlowGate, messages: int, nbytes: int) -> None:
        releases.append((messages, nbytes))
        release(gate, messages, nbytes)

    monkeypatch.setattr(FlowGate, "release", counted)
    topic = RunTopic()
    publisher = Publisher(topic, system=system, batching=batching(max_messages=100),
                          message_ordering=True,
                          flow_control=FlowControl(max_outstanding_messages=5))
    futures = [publisher.publish(data, ordering_key=key) for data, key in [
        (b"a1", "a"), (b"b1", "b"), (b"a2", "a"), (b"c1", "c"), (b"c22", "c")]]
    sixth: list[Future[str]] = []
    blocked = threading.Thread(target=lambda: sixth.append(publisher.publish(b"d", ordering_key="d")))
    blocked.start()  # the window is full: it waits, and its wait sends the three batches
    assert topic.arrived.wait(10.0)
    closed = TopicClosedError("runs")

    topic.arrived.clear()
    topic.runs[0][1]([(["1", "2"], None), (["3"], None), (["4"], closed)])
    blocked.join(10.0)

    assert releases == [(2, 4), (1, 2), (2, 5)]  # batch by batch (c accepted in part)
    assert [f.result(10.0) for f in futures[:4]] == ["1", "3", "2", "4"]
    assert futures[4].exception(10.0) is closed
    assert not blocked.is_alive() and len(sixth) == 1  # the waiter was admitted by it
    assert publisher.outstanding == (1, 1)
    flushed = threading.Thread(target=publisher.flush, args=(10.0,))
    flushed.start()
    assert topic.arrived.wait(10.0)
    topic.runs[1][1]([(["6"], None)])
    flushed.join(10.0)
    assert sixth[0].result(10.0) == "6" and releases == [(2, 4), (1, 2), (2, 5), (1, 1)]
    publisher.close(10.0)


def test_a_topic_that_raises_fails_every_batch_of_the_run(system: ActorSystem) -> None:
    boom = RuntimeError("topic broke")
    publisher = Publisher(RunTopic(raises=boom), system=system, batching=batching())
    futures = [publisher.publish(b"m%d" % n) for n in range(3)]

    publisher.flush(10.0)

    assert [f.exception(10.0) for f in futures] == [boom] * 3
    publisher.close(10.0)


def test_a_local_topic_resolves_one_future_with_each_batch_s_ids_in_order() -> None:
    with Bus() as bus:
        topic = bus.create_topic("runs", ack_timeout=None, balanced_capacity=RUN * 10)
        topic.create_group("g")
        outcomes = topic._publish_batches(
            [([b"x"] * 2, [{}] * 2, [None] * 2), ([b"y"], [{"k": "v"}], ["k"])]).result(10.0)
        stats = topic.stats()

    assert outcomes == [(["1", "2"], None), (["3"], None)]
    assert stats.published == 3 and stats.pending == 3


def test_a_closed_topic_refuses_a_run_at_once() -> None:
    with Bus() as bus:
        topic = bus.create_topic("runs")
        topic.close()

        future = topic._publish_batches([([b"x"], [{}], [None])] * 2)

    assert future.done()
    outcomes = future.result()
    assert [ids for ids, _ in outcomes] == [None, None]
    assert all(isinstance(error, TopicClosedError) for _, error in outcomes)


