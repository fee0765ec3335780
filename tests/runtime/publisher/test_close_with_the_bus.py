"""bus.close() with Publishers: one budget, a held topic releases them at once (issue 15
item 8), and what a Publisher holds is still flushed when the topic can take it."""

from __future__ import annotations

import time
from concurrent.futures import wait

from support.reliability import wait_until

from runtime import BatchSettings, Bus


def test_bus_close_releases_publishers_held_by_a_full_group_at_once() -> None:
    bus = Bus()
    topic = bus.create_topic("t")
    topic.create_group("g")  # no member: the group fills at 128 and stays full
    publishers = [topic.publisher(), topic.publisher()]
    futures = [p.publish(b"%d-%d" % (i, n)) for i, p in enumerate(publishers) for n in range(300)]
    # The topic took a batch (its futures resolve with the whole run of batches, which
    # the full group holds).
    assert wait_until(lambda: topic.stats().published > 0, timeout=10)

    started = time.monotonic()
    bus.close()
    took = time.monotonic() - started

    assert took < 2.5  # was 5 s: each blocked flush waited out the whole budget
    wait(futures, timeout=5)
    resolved = {f.result() for f in futures if f.exception() is None}
    stats = topic.stats()
    assert len(resolved) == stats.published and 0 < len(resolved) < 600
    assert {d.message_id for d in topic.dead_letters} == resolved
    assert {d.reason for d in topic.dead_letters} == {"closed"}


def test_bus_close_still_flushes_what_the_topic_can_take() -> None:
    seen: list[bytes] = []
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(lambda d: (seen.append(d.message.data), d.ack()), group="g")
        publisher = topic.publisher(batching=BatchSettings(max_messages=1000, max_latency=60))
        futures = [publisher.publish(b"%d" % n) for n in range(10)]

    assert all(f.exception() is None for f in futures)
    stats = topic.stats()
    assert stats.published == 10
    assert stats.delivered + stats.dead_lettered == 10
