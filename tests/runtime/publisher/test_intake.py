"""The Publisher's intake: publishes in order, exact counts, no lost future."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime.errors import PublishError, WouldBlock
from runtime.publisher._flow_control import FlowControl, FlowGate
from runtime.publisher._intake import MAX_QUEUED, Bulk, Intake, PublishFuture
from runtime.publisher._publisher import Publisher


def _intake() -> Intake:
    return Intake(FlowGate(FlowControl()))


def test_intake_gathers_consecutive_publishes_alike_into_runs_in_order() -> None:
    intake = _intake()
    shared: dict[str, str] = {}
    futures: list[PublishFuture] = [PublishFuture() for _ in range(5)]
    keys = [None, "k", "k", "k", None]
    for n, key in enumerate(keys):
        intake.put(b"x" * (n + 1), shared, key, futures[n], n + 1)

    assert intake.queued() == 5
    with intake._gate.lock:
        taken = intake.take()
    intake.put(b"late", shared, None, PublishFuture(), 4)

    # The intake holds each future weakly: dereferenced, they are the very futures.
    assert [(run[0], run[1], run[2], [held() for held in run[3]], run[4], run[5])
            for run in taken] == [
        ([b"x"], shared, None, futures[:1], 0, [1]),
        ([b"xx", b"xxx", b"xxxx"], shared, "k", futures[1:4], 0, [2, 3, 4]),
        ([b"xxxxx"], shared, None, futures[4:], 0, [5]),
    ]
    with intake._gate.lock:
        assert [run[0] for run in intake.take()] == [[b"late"]]
        assert intake.queued() == 0 and intake.take() == []
    assert intake._gate.outstanding == (6, 19)  # admitted by the gate, released by settling


@pytest.mark.parametrize("ordering", [False, True])
def test_interleaved_keys_gather_into_one_run_per_key_only_with_ordering(ordering: bool) -> None:
    intake = Intake(FlowGate(FlowControl()), ordering=ordering)
    shared: dict[str, str] = {}
    for n, key in enumerate(["a", "b", "a", "b", None, "a"]):
        intake.put(b"%d" % n, shared, key, PublishFuture(), 1)

    with intake._gate.lock:
        runs = [(run[2], run[0]) for run in intake.take()]

    if ordering:  # each key is a lane: its order is all that must hold
        assert runs == [("a", [b"0", b"2", b"5"]), ("b", [b"1", b"3"]), (None, [b"4"])]
    else:  # one lane: publish order across keys
        assert runs == [("a", [b"0"]), ("b", [b"1"]), ("a", [b"2"]), ("b", [b"3"]),
                        (None, [b"4"]), ("a", [b"5"])]


def test_publishes_with_their_own_attributes_and_bulk_runs_stay_apart() -> None:
    intake = _intake()
    bulk = Bulk(2)
    intake.put(b"a", {"n": "1"}, None, PublishFuture(), 2)
    intake.put(b"b", {"n": "1"}, None, PublishFuture(), 2)  # an equal, other copy
    with intake._gate.lock:
        intake.add(([b"c", b"d"], {}, None, bulk, 0, [1, 1]))
    intake.put(b"e", {}, None, PublishFuture(), 1)  # never appended to a bulk run

    with intake._gate.lock:
        runs = intake.take()

    assert [run[0] for run in runs] == [[b"a"], [b"b"], [b"c", b"d"], [b"e"]]
    assert runs[2][3] is bulk


def test_a_sealed_intake_gives_what_it_held_and_refuses_more() -> None:
    intake = _intake()
    intake.put(b"held", {}, None, PublishFuture(), 4)

    with intake._gate.lock:
        held = intake.seal()

    assert [item[0] for item in held] == [[b"held"]] and intake.sealed
    with pytest.raises(PublishError, match="Publisher is closed"):
        intake.put(b"late", {}, None, PublishFuture(), 4)
    assert intake._gate.outstanding == (1, 4)  # the refused one was given back


def test_a_publish_that_would_wait_is_refused_untouched() -> None:
    intake = Intake(FlowGate(FlowControl(max_outstanding_messages=1)))
    assert intake.put(b"a", {}, None, PublishFuture(), 1) is True

    with pytest.raises(WouldBlock):
        intake.put(b"b", {}, None, PublishFuture(), 1)

    assert intake.queued() == 1 and intake._gate.outstanding == (1, 1)


def test_unlimited_outstanding_is_exact_while_messages_wait(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    with Publisher(topic, system=system, batching=batching(max_messages=4)) as pub:
        futures = [pub.publish(b"x" * n) for n in range(1, 11)]

        assert pub.outstanding == (10, 55)  # wherever they are: intake, batch, topic
        topic.wait_for_batches(2)
        assert pub.outstanding == (10, 55)
        topic.stop_holding()
        pub.flush(timeout=10)

        assert pub.outstanding == (0, 0)
        assert [f.result(timeout=0) for f in futures] == [f"fake-{n}" for n in range(1, 11)]


def test_order_holds_while_flow_control_comes_and_goes(system: ActorSystem) -> None:
    topic = FakeTopic()
    limited = FlowControl(max_outstanding_messages=1000)
    with Publisher(topic, system=system, batching=batching(max_messages=7),
                   message_ordering=True) as pub:
        for n in range(300):
            if n % 50 == 0:
                pub.set_options(flow_control=limited if n % 100 else FlowControl())
            pub.publish(b"%d" % n, ordering_key="k")
        pub.flush(timeout=10)

        sent = [data for batch in topic.datas() for data in batch]
        assert sent == [b"%d" % n for n in range(300)]
        assert pub.outstanding == (0, 0)


def test_concurrent_unlimited_publishers_lose_nothing_and_keep_order(
    system: ActorSystem,
) -> None:
    topic = FakeTopic()
    threads, per_thread = 4, 3000
    futures: list[list[Future[str]]] = [[] for _ in range(threads)]
    with Publisher(topic, system=system, batching=batching(max_messages=100)) as pub:

        def publish(t: int) -> None:
            for n in range(per_thread):
                futures[t].append(pub.publish(b"%d:%d" % (t, n)))

        workers = [threading.Thread(target=publish, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        pub.flush(timeout=30)

        ids = [f.result(timeout=0) for fs in futures for f in fs]
        assert len(set(ids)) == threads * per_thread
        sent = [data.split(b":") for batch in topic.datas() for data in batch]
        for t in range(threads):
            mine = [int(n) for owner, n in sent if owner == b"%d" % t]
            assert mine == list(range(per_thread))
        assert pub.outstanding == (0, 0)


def test_close_racing_unlimited_publishers_settles_every_future(system: ActorSystem) -> None:
    topic = FakeTopic()
    futures: list[PublishFuture] = []
    errors: list[PublishError] = []
    started = threading.Barrier(4)
    pub = Publisher(topic, system=system, batching=batching(max_messages=50))

    def publish() -> None:
        started.wait(timeout=10)
        try:
            while True:
                futures.append(pub.publish(b"x"))
        except PublishError as exc:
            errors.append(exc)

    workers = [threading.Thread(target=publish) for _ in range(3)]
    for worker in workers:
        worker.start()
    started.wait(timeout=10)
    pub.close(timeout=30)
    for worker in workers:
        worker.join(timeout=30)

    assert not any(worker.is_alive() for worker in workers)
    assert len(errors) == 3 and all(e.code == 9 for e in errors)
    assert all(f.done() for f in futures)
    failed = [f.exception() for f in futures if f.exception() is not None]
    assert all(isinstance(e, PublishError) and e.code == 9 for e in failed)
    confirmed = [f.result() for f in futures if f.exception() is None]
    assert len(confirmed) == sum(map(len, topic.datas()))  # what the topic got, and only that
    assert pub.outstanding == (0, 0)


def test_publish_after_the_actor_stopped_without_close_is_refused(
    system: ActorSystem,
) -> None:
    pub = Publisher(FakeTopic(), system=system)
    pub._ref.stop(timeout=10)  # as a system shutdown would, with no close() first

    with pytest.raises(PublishError) as refused:
        pub.publish(b"late")

    assert refused.value.code == 9
    assert pub.outstanding == (0, 0)


@pytest.mark.parametrize("limited", [False, True])
def test_outstanding_returns_to_zero_on_both_paths(system: ActorSystem, limited: bool) -> None:
    flow = FlowControl(max_outstanding_messages=10_000) if limited else FlowControl()
    with Publisher(FakeTopic(), system=system, flow_control=flow,
                   batching=batching(max_messages=64)) as pub:
        futures = [pub.publish(b"abc") for _ in range(1000)]
        pub.flush(timeout=10)

        assert all(f.done() and f.exception() is None for f in futures)
        assert pub.outstanding == (0, 0)


def test_the_actor_is_told_once_per_drain_not_once_per_message() -> None:
    intake = _intake()
    shared: dict[str, str] = {}

    told = [intake.put(b"x", shared, None, PublishFuture(), 1) for _ in range(3)]

    assert told == [True, False, False]
    with intake._gate.lock:
        assert len(intake.take()[0][0]) == 3  # one run of three
    assert intake.put(b"x", shared, None, PublishFuture(), 1) is True  # the next one rings again


def test_a_publisher_waits_for_the_actor_once_the_intake_is_full(system: ActorSystem) -> None:
    # The actor is held inside a send: what is published meanwhile piles up in the
    # intake, up to MAX_QUEUED; the next publish waits until the actor takes them.
    topic = FakeTopic()
    entered, release = threading.Event(), threading.Event()
    send = topic._publish_batch

    def held(messages: list[Any]) -> Future[list[str]]:
        entered.set()
        assert release.wait(10.0)
        return send(messages)

    topic._publish_batch = held  # type: ignore[method-assign]
    with Publisher(topic, system=system, batching=batching(max_messages=1)) as pub:
        pub.publish(b"first")
        assert entered.wait(5.0)
        queued = [pub.publish(b"%d" % n) for n in range(MAX_QUEUED)]
        waiting = threading.Thread(target=lambda: queued.append(pub.publish(b"last")))
        waiting.start()
        waiting.join(0.2)
        assert waiting.is_alive() and pub._intake.queued() == MAX_QUEUED

        release.set()
        waiting.join(10.0)
        pub.flush(timeout=10.0)

        assert not waiting.is_alive() and len(queued) == MAX_QUEUED + 1
        assert [f.result(timeout=0) for f in queued] == [
            f"fake-{n}" for n in range(2, MAX_QUEUED + 3)]
