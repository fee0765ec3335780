"""Every publish gets a future of its own: new, never handed to another message."""

from __future__ import annotations

import asyncio
import gc
import weakref
from concurrent.futures import Future
from queue import Queue

import pytest
from support.publisher import FakeTopic

from actors import ActorSystem
from runtime import Bus
from runtime.errors import PublishError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._publisher import Publisher

COUNT = 10_000


def test_ten_thousand_publishes_return_ten_thousand_distinct_futures(system: ActorSystem) -> None:
    with Publisher(FakeTopic(), system=system, batching=BatchSettings(max_messages=64)) as pub:
        futures = [pub.publish(b"%d" % n) for n in range(COUNT)]
        pub.flush(timeout=10.0)

        ids = [future.result(timeout=0) for future in futures]

    assert len({id(future) for future in futures}) == COUNT
    assert all(isinstance(future, Future) and not future.cancel() for future in futures)
    assert ids == [f"fake-{n}" for n in range(1, COUNT + 1)]


def test_a_dropped_future_is_never_handed_to_a_later_publish(system: ActorSystem) -> None:
    # Fire and forget first: nobody holds these futures. A later publish still gets a
    # new, pending future that resolves with its own id.
    with Publisher(FakeTopic(), system=system, batching=BatchSettings(max_messages=10)) as pub:
        for n in range(1_000):
            pub.publish(b"dropped-%d" % n)
        pub.flush(timeout=10.0)
        gc.collect()
        seen_before = {id(obj) for obj in gc.get_objects() if isinstance(obj, Future)}

        later = [pub.publish(b"kept-%d" % n) for n in range(100)]
        pub.flush(timeout=10.0)

        ids = [future.result(timeout=0) for future in later]

    assert ids == [f"fake-{n}" for n in range(1_001, 1_101)]
    assert not {id(future) for future in later} & seen_before


def test_futures_resolve_with_the_ids_the_topic_gave_their_messages() -> None:
    with Bus() as bus:
        topic = bus.create_topic("own-ids", ack_timeout=None)
        pull = topic.subscription(group="readers")
        with topic.publisher(batching=BatchSettings(max_messages=7)) as pub:
            futures = {pub.publish(b"m%d" % n): b"m%d" % n for n in range(50)}
            pub.flush(timeout=10.0)
        received = {}
        for _ in range(50):
            delivery = pull.receive(timeout=5.0)
            received[delivery.message_id] = delivery.message.data
            delivery.ack()

    assert {future.result(timeout=0): data for future, data in futures.items()} == received


def test_the_publisher_does_not_keep_a_future_its_caller_dropped(system: ActorSystem) -> None:
    # The topic holds the batch: nothing is confirmed yet. The caller's future is the only
    # strong reference; once dropped it is gone, and the message is still published.
    topic = FakeTopic(hold=True)
    with Publisher(topic, system=system, batching=BatchSettings(max_messages=1)) as pub:
        watched = weakref.ref(pub.publish(b"dropped"))
        kept = pub.publish(b"kept")
        topic.wait_for_held(2)
        gc.collect()

        assert watched() is None
        assert not kept.done()
        topic.stop_holding()
        pub.flush(timeout=10.0)

        assert kept.result(timeout=0) == "fake-2"
    assert topic.datas() == [[b"dropped"], [b"kept"]]


@pytest.mark.parametrize("fails", [False, True])
def test_a_done_callback_runs_although_its_future_was_dropped(
    system: ActorSystem, fails: bool,
) -> None:
    topic = FakeTopic(hold=True)
    outcomes: Queue[tuple[str, object]] = Queue()

    def record(future: Future[str]) -> None:
        error = future.exception()
        outcomes.put(("error", error) if error is not None else ("id", future.result()))

    with Publisher(topic, system=system, batching=BatchSettings(max_messages=2)) as pub:
        for n in range(4):
            pub.publish(b"m%d" % n).add_done_callback(record)  # the futures are not kept
        topic.wait_for_held(2)
        gc.collect()
        if fails:
            topic.fail(PublishError("refused", 13), count=2)
        else:
            topic.stop_holding()
        got = [outcomes.get(timeout=10.0) for _ in range(4)]
        pub.flush(timeout=10.0)

        if fails:
            assert [kind for kind, _ in got] == ["error"] * 4
            assert {str(error) for _, error in got} == {"refused"}
        else:
            assert got == [("id", f"fake-{n}") for n in range(1, 5)]
        assert pub._intake.kept == set()  # each left the keeping set once done


def test_a_callback_added_to_a_done_future_runs_at_once_and_keeps_nothing(
    system: ActorSystem,
) -> None:
    with Publisher(FakeTopic(), system=system, batching=BatchSettings(max_messages=1)) as pub:
        future = pub.publish(b"m")
        pub.flush(timeout=10.0)
        seen: list[str] = []

        future.add_done_callback(lambda done: seen.append(done.result()))

        assert seen == ["fake-1"]
        assert pub._intake.kept == set()


def test_an_awaited_publish_resolves_although_only_asyncio_holds_it(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)

    async def publish_and_await(pub: Publisher) -> str:
        waiting = asyncio.wrap_future(pub.publish(b"m"))  # the Future itself is not kept
        await asyncio.to_thread(topic.wait_for_held, 1)
        gc.collect()
        topic.stop_holding()
        return await asyncio.wait_for(waiting, 10.0)

    with Publisher(topic, system=system, batching=BatchSettings(max_messages=1)) as pub:
        assert asyncio.run(publish_and_await(pub)) == "fake-1"
