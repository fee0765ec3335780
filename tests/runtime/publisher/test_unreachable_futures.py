"""Publish futures the caller discards: observable behaviour (callbacks, weak
references, failures) holds, and nothing is guessed from reference counts any more
(`drop_unreachable` keeps every future)."""

from __future__ import annotations

import gc
import weakref
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime.core._future import MessageFuture
from runtime.errors import OrderingKeyPausedError, PublishError
from runtime.publisher._intake import Intake
from runtime.publisher._publisher import Publisher
from runtime.publisher._unreachable import drop_unreachable

COUNT = 200


def pending_futures() -> int:
    """How many unresolved publish futures exist in this process."""
    return sum(
        1 for item in gc.get_objects()
        if item.__class__ is MessageFuture and not item.done()
    )


def test_a_list_where_every_future_is_held_comes_back_whole() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(50)]
    elsewhere = list(futures)

    assert drop_unreachable(futures, [], 0) == elsewhere


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


def test_spares_are_trimmed_to_twice_the_recent_peak_drain_and_a_little_more() -> None:
    intake = Intake()
    intake.spares += [MessageFuture() for _ in range(70_000)]

    assert intake.spare_room(100_000) == 65_536 and len(intake.spares) == 65_536
    rooms = [intake.spare_room(100) for _ in range(60)]

    # The peak loses an eighth per drain: 87,500, 76,563, ..., 34,363, 30,068.
    assert rooms[:8] == [65_536] * 8 and rooms[8] == 2 * 30_068 + 1_024
    assert rooms == sorted(rooms, reverse=True)
    assert rooms[-1] == 2 * 100 + 1_024 and len(intake.spares) == 1_224
    assert [intake.spare_room(4_000), intake.spare_room(0)] == [9_024, 2 * 3_500 + 1_024]
