"""Futures nobody can read are not kept until their batch is confirmed; every other is.

A Publisher drops a publish future from its batch when the caller kept no reference,
weak reference, callback or waiter: nothing can observe it any more. Everything
observable behaves as before: kept futures resolve with their ids, callbacks of
discarded futures run, and every message reaches the topic in order.
"""

from __future__ import annotations

import gc
import weakref
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime.core._future import MessageFuture, drop_unreachable
from runtime.errors import OrderingKeyPausedError, PublishError
from runtime.publisher._publisher import Publisher

COUNT = 200


def pending_futures() -> int:
    """How many unresolved publish futures exist in this process."""
    return sum(
        1 for item in gc.get_objects()
        if item.__class__ is MessageFuture and not item.done()
    )


def test_only_futures_held_nowhere_else_are_dropped() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(6)]
    held = futures[1]
    futures[2].add_done_callback(lambda _: None)
    referenced = weakref.ref(futures[3])
    with pytest.raises(TimeoutError):
        futures[4].result(timeout=0)  # builds its condition, as a waiter does

    kept = drop_unreachable(futures)

    assert [future is None for future in kept] == [True, False, False, False, False, True]
    assert kept[1] is held and kept[3] is referenced()
    assert kept[2] is futures[2] and kept[4] is futures[4]


def test_a_list_where_every_future_is_held_comes_back_whole() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(50)]
    elsewhere = list(futures)

    assert drop_unreachable(futures) == elsewhere


def test_a_list_where_no_future_is_held_comes_back_all_none() -> None:
    assert drop_unreachable([MessageFuture() for _ in range(50)]) == [None] * 50


def test_discarded_futures_do_not_wait_for_their_batch(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    before = pending_futures()
    with Publisher(topic, system=system, batching=batching(max_messages=10)) as pub:
        kept = {}
        for index in range(COUNT):
            future = pub.publish(b"m%d" % index)
            if index % 20 == 0:
                kept[index] = future
        del future
        topic.wait_for_batches(COUNT // 10)  # the actor took every message
        waiting = pending_futures() - before
        topic.stop_holding()
        pub.flush(timeout=5.0)

    assert waiting == len(kept)
    assert [m.data for batch in topic.batches for m in batch] == [
        b"m%d" % index for index in range(COUNT)]
    ids = [kept[index].result(timeout=0) for index in sorted(kept)]
    assert ids == [f"fake-{index + 1}" for index in sorted(kept)]


def test_callbacks_and_weak_references_keep_a_discarded_future(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    seen: list[str] = []
    with Publisher(topic, system=system, batching=batching(max_messages=10)) as pub:
        pub.publish(b"first").add_done_callback(lambda done: seen.append(done.result()))
        referenced = weakref.ref(pub.publish(b"second"))
        for index in range(8):
            pub.publish(b"filler-%d" % index)
        topic.wait_for_batches(1)
        second = referenced()  # still there: a weak reference could read it
        topic.stop_holding()
        pub.flush(timeout=5.0)

    assert seen == ["fake-1"]
    assert second is not None and second.result(timeout=0) == "fake-2"


def test_a_failed_batch_of_discarded_futures_pauses_its_key(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    settings = batching(max_messages=5)
    with Publisher(topic, system=system, batching=settings, message_ordering=True) as pub:
        for index in range(5):
            pub.publish(b"a%d" % index, ordering_key="A")
        later: list[Future[str]] = [pub.publish(b"a-late", ordering_key="A")]
        topic.wait_for_held(1)
        topic.fail(PublishError("refused", 13))

        with pytest.raises(OrderingKeyPausedError):
            later[0].result(timeout=5.0)
        pub.flush(timeout=5.0)  # an ask: the actor is done with the failure
        assert pub.paused_keys() == ["A"]
        assert [len(batch) for batch in topic.batches] == [5]
