"""Fan-out chunks sized to the room there is (`PublishPath.room`): larger while the
members have room and nobody reads the broadcast ring, the settings' chunk otherwise,
and a chunk that meets a subscriber come since it was sized goes again in pieces."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime import Bus, Delivery, Topic
from runtime.core import _publishing
from runtime.core._publishing import MAX_CHUNK, PublishPath

CAPACITY = 8  # balanced_capacity and broadcast_capacity: the settings' chunk


@pytest.fixture
def fan_outs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every fan-out the topics attempt, in order."""
    sizes: list[int] = []
    original = _publishing.PublishPath.fan_out

    def fan_out(self: Any, envelopes: Any, *args: Any) -> Any:
        sizes.append(len(envelopes))
        return original(self, envelopes, *args)

    monkeypatch.setattr(_publishing.PublishPath, "fan_out", fan_out)
    return sizes


def small_topic(bus: Bus) -> Topic[Any]:
    return bus.create_topic("t", balanced_capacity=CAPACITY, broadcast_capacity=CAPACITY)


def acking(seen: list[Any]) -> Any:
    def handler(delivery: Delivery[Any]) -> None:
        seen.append(delivery.message.data)
        delivery.ack()
    return handler


def publish_all(topic: Topic[Any], datas: list[bytes]) -> None:
    publisher = topic.publisher()
    for data in datas:
        publisher.publish(data)
    publisher.flush(10.0)
    assert topic.join(timeout=10.0)


def test_room_is_the_chunk_without_groups_and_grows_with_an_idle_member_s_room(bus: Bus) -> None:
    topic = small_topic(bus)
    path: PublishPath = topic._path
    assert path.room(False) == path.room(True) == CAPACITY

    seen: list[bytes] = []
    topic.subscribe(acking(seen), group="g", prefetch=64)
    publish_all(topic, [b"warm-up"])  # the group has run: it lent its member's room

    assert seen == [b"warm-up"]
    # The member's room: 64, or 63 while the group has yet to read the warm-up's credit.
    assert CAPACITY + 63 <= path.room(True) <= path.room(False) <= CAPACITY + 64


def test_a_broadcast_subscriber_keeps_the_chunk_to_the_ring(bus: Bus) -> None:
    topic = small_topic(bus)
    topic.subscribe(acking([]), group="g", prefetch=64)
    topic.subscribe(acking([]))
    publish_all(topic, [b"warm-up"])

    assert topic._path.room(False) == CAPACITY


def room_while_stuck(topic: Topic[Any], prefetch: int, published: int, keyed: bool) -> int:
    """``topic._path.room(keyed)`` while group "stuck" (a member of ``prefetch`` whose
    handler waits) holds the first of ``published`` messages; then lets it go."""
    release, started = threading.Event(), threading.Event()

    def stuck(delivery: Delivery[Any]) -> None:
        started.set()
        release.wait(10.0)
        delivery.ack()

    topic.subscribe(stuck, group="stuck", prefetch=prefetch)
    for n in range(published):
        topic.publish(b"%d" % n)
    assert started.wait(10.0)
    try:
        return topic._path.room(keyed)
    finally:
        release.set()
        assert topic.join(timeout=10.0)


def test_a_stuck_member_lends_nothing_so_the_chunk_stays_the_settings_one(bus: Bus) -> None:
    topic = small_topic(bus)

    assert room_while_stuck(topic, prefetch=2, published=2, keyed=True) == CAPACITY


def test_room_is_what_the_fullest_group_can_take(bus: Bus) -> None:
    topic = small_topic(bus)
    topic.subscribe(acking([]), group="idle", prefetch=64)

    # The idle group would lend 64; the stuck one lends nothing.
    assert room_while_stuck(topic, prefetch=1, published=1, keyed=False) == CAPACITY


def test_a_publisher_s_run_reaches_idle_members_in_larger_chunks_in_order(
    bus: Bus, fan_outs: list[int],
) -> None:
    topic = small_topic(bus)
    seen: list[bytes] = []
    topic.subscribe(acking(seen), group="g", prefetch=64)
    publish_all(topic, [b"warm-up"])
    fan_outs.clear()
    datas = [f"m{n}".encode() for n in range(300)]

    publish_all(topic, datas)

    assert seen[1:] == datas
    assert sum(fan_outs) == 300
    assert CAPACITY < max(fan_outs) <= CAPACITY + 64
    assert topic.stats().published == 301
    assert topic.stats().delivered == 301


def test_a_chunk_sized_before_a_subscriber_came_goes_again_in_pieces_that_fit_the_ring(
    bus: Bus, fan_outs: list[int], monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = small_topic(bus)
    grouped: list[bytes] = []
    broadcast: list[bytes] = []
    topic.subscribe(acking(grouped), group="g", prefetch=64)
    topic.subscribe(acking(broadcast))
    # As if sized while nobody read the ring: the subscriber came just after.
    monkeypatch.setattr(PublishPath, "room", lambda self, keyed: 40)
    datas = [f"m{n}".encode() for n in range(40)]

    publish_all(topic, datas)

    assert grouped == datas
    assert broadcast == datas
    assert fan_outs == [40] + [CAPACITY] * 5  # refused whole, then chunks the ring holds
    stats = topic.stats()
    assert (stats.published, stats.delivered, stats.pending) == (40, 40, 0)
    handle = topic._subscribers.handles[0]
    assert handle.gate.used == 0  # the refused chunk's room was given back


def test_room_never_passes_the_largest_chunk(bus: Bus) -> None:
    topic = small_topic(bus)
    topic.subscribe(acking([]), group="g", prefetch=MAX_CHUNK * 2)
    publish_all(topic, [b"warm-up"])

    assert topic._path.room(False) == MAX_CHUNK
