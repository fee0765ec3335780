"""The Publisher's intake: lock-free publishes without limits, exact counts, no lost future."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime.errors import PublishError
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._intake import WIDTH, YIELD_EVERY, Intake, Row, uncounted
from runtime.publisher._publisher import Publisher


def test_intake_takes_messages_in_order_and_counts_only_the_uncounted() -> None:
    intake = Intake()
    futures: list[Future[str]] = [Future() for _ in range(4)]
    for n, counted in enumerate([False, True, False, True]):
        intake.rows.extend((b"x" * (n + 1), {}, "k" if n else None, futures[n], n + 1, counted))

    assert intake.queued() == (2, 1 + 3)
    datas, attributes, keys, taken, sizes, flags = intake.take()
    intake.rows.extend((b"late", {}, None, Future(), 4, False))

    assert datas == [b"x", b"xx", b"xxx", b"xxxx"] and attributes == [{}] * 4
    assert keys == [None, "k", "k", "k"] and taken == futures and sizes == [1, 2, 3, 4]
    assert flags == [False, True, False, True]
    assert intake.queued() == (1, 4)
    assert intake.take()[0] == [b"late"]
    assert intake.queued() == (0, 0) and intake.take()[3] == []
    assert uncounted([5, 6, 7], [False, True, False]) == (2, 12)
    assert uncounted([5, 6], [True, True]) == (0, 0)
    assert uncounted([5, 6], [False, False]) == (2, 11)


class _ExtendedWhileSliced(list[object]):
    """Rows that a publisher extends between two of `take`'s column slices."""

    def __getitem__(self, index: object) -> object:
        if isinstance(index, slice) and not getattr(self, "extended", False):
            self.extended = True
            self.extend((b"late", {}, None, Future(), 4, False))
        return super().__getitem__(index)  # type: ignore[index]


def test_a_message_added_while_take_slices_is_taken_once_and_whole() -> None:
    intake = Intake()
    rows = _ExtendedWhileSliced()
    intake.rows = rows  # type: ignore[assignment]
    rows.extend((b"early", {}, None, Future(), 5, False))

    first, second = intake.take(), intake.take()

    assert len({len(column) for column in first}) == 1  # no message torn across columns
    assert len({len(column) for column in second}) == 1
    assert first[0] + second[0] == [b"early", b"late"] and first[4] + second[4] == [5, 4]
    assert len(rows) == 0


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
    futures: list[Future[str]] = []
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


def test_publish_after_the_actor_stopped_without_close_fails_its_future(
    system: ActorSystem,
) -> None:
    pub = Publisher(FakeTopic(), system=system)
    pub._ref.stop(timeout=10)  # as a system shutdown would, with no close() first

    future = pub.publish(b"late")

    error = future.exception(timeout=5)
    assert isinstance(error, PublishError) and error.code == 9
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
    intake = Intake()
    row: Row = (b"x", {}, None, Future(), 1, False)

    assert [intake.add(row), intake.add(row), intake.add(row)] == [True, False, False]
    assert len(intake.take()[0]) == 3
    assert intake.add(row) is True  # the drain cleared it: the next message rings again


def test_a_publisher_running_ahead_of_the_actor_yields_every_1024_waiting_messages(
    system: ActorSystem, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.publisher import _publisher

    with Publisher(FakeTopic(), system=system) as pub:
        told: list[object] = []
        tell = pub._tell
        pub._tell = told.append  # the drain is held back: the actor never takes
        waiting: list[tuple[int, float]] = []
        monkeypatch.setattr(_publisher, "_yield", lambda seconds: waiting.append(
            (len(pub._intake.rows) // WIDTH, seconds)))

        futures = [pub.publish(b"%d" % n) for n in range(3 * YIELD_EVERY + 10)]

        assert YIELD_EVERY == 1_024 and waiting == [(1_024, 0), (2_048, 0), (3_072, 0)]
        assert len(told) == 1  # one drain asked for, none taken
        pub._tell = tell
        tell(told[0])
        pub.flush(timeout=10)
        assert [f.result(timeout=0) for f in futures] == [
            f"fake-{n}" for n in range(1, 3 * YIELD_EVERY + 11)]
