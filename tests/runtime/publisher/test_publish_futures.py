"""Every publish gets a future of its own: new, never handed to another message."""

from __future__ import annotations

import gc
from concurrent.futures import Future

from support.publisher import FakeTopic

from actors import ActorSystem
from runtime import Bus
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
