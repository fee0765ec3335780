"""Keyed messages over two Redis partitions, each owned by one of two worker processes
(``redis_partitions``).

The candidate publishes ``count`` 100-byte messages with 64 ordering keys through a
`Publisher` into a ``backend="redis"`` topic of two partitions whose group has two worker
processes: each owns one partition, so each key's messages run in order and both workers
run at once. The handler spins about 200 us per message (``auto_ack``). The baseline is the
same traffic through a topic of one partition read in order, by one worker process (one
owner at a time: the rate one ordered stream allows). Target 1.5. The extra row
``redis_partitions/compete`` compares with one partition and two competing workers (no
per-key order across them): what keeping the order across two partitions costs.

The Redis is ``redis_pipeline``'s: ``ACTORBUS_BENCH_REDIS``, or a redis-server of its own.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from runtime import Bus

from ._cpu_scaling import iterations_per_task, spin_delivery
from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, per_second
from ._redis_pipeline import redis_url, run_ours

__all__ = ["SCENARIOS"]

_KEYS = 64
_HANDLER_SECONDS = 200e-6


def measure(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second through two owned partitions vs one partition's ordered rate
    (and vs one partition with two competing workers)."""
    count = profile.count(10_000, minimum=200)
    messages = payloads(count)
    handler = partial(spin_delivery, iterations_per_task(_HANDLER_SECONDS))
    with redis_url() as url, Bus(redis=url) as bus:
        topics = []
        sides = {}
        for side, partitions, workers in (("two", 2, 2), ("one", 1, 1), ("compete", 1, 2)):
            name = f"bench-partitions-{side}-{uuid.uuid4().hex[:8]}"
            topic: Any = bus.create_topic(name, backend="redis", partitions=partitions)
            topic.subscribe(handler, group="workers", workers=workers, auto_ack=True)
            topics.append(topic)
            sides[side] = partial(per_second, count,
                                  partial(run_ours, topic, topic.publisher(), messages, _KEYS))
        try:
            medians = interleave(sides, repeats=profile.repeats)
        finally:
            for topic in topics:
                topic.destroy()
    return (
        Comparison(value=medians["two"], baseline_value=medians["one"]),
        Comparison(value=medians["two"], baseline_value=medians["compete"], suffix="compete",
                   baseline="1 partition, workers=2 competing (no per-key order), ~200 us "
                            "handler"),
    )


SCENARIOS = (
    Scenario(name="redis_partitions", unit="msg/s",
             baseline="1 partition read in order by workers=1, ~200 us handler, 64 keys",
             target=1.5, measure=measure),
)
