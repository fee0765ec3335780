"""CPU-bound work fanned out over a Redis topic's ``workers=2`` group (``redis_fanout_cpu``).

The ``fanout_cpu`` measurement on a ``backend="redis"`` topic: messages go through a
`Publisher` (default batching) to a group of two worker processes whose handler spins
about 200 us per message and acks in Redis; a round ends when the Publisher flushed and
``topic.join`` saw nothing pending. Its speedup over the same work run serially is
compared with the best speedup of the standard library's pools in their best
configuration (fork ``ProcessPoolExecutor(2).map`` and ``mp.Pool(2).imap_unordered``,
given every message at once, chunks of 25), all in the same rounds. Target 0.9. The
extra row ``redis_fanout_cpu/publish1`` publishes one message at a time
(``topic.publish``, one Redis round trip each) against the same baseline, and the extra
row ``redis_fanout_cpu/raw`` compares our speedup with the raw redis-py fan-out's on the
same server and handler (`RawCeiling`: 100 XADDs per Lua call, two consumer processes
reading 100 at a time, each message spun, then XACK): what Redis and its client cost
before any tracking, on the same cores. Both report only.
The Redis is the one of ``redis_pipeline`` (``ACTORBUS_BENCH_REDIS``, or a redis-server
of its own); without one the rows are skipped with the reason.
"""

from __future__ import annotations

import uuid
from contextlib import closing
from dataclasses import replace
from functools import partial
from typing import Any

from runtime import Bus

from ._cpu_scaling import (
    fanout_messages,
    publish_each,
    seconds,
    speedups,
    spin_delivery,
    spin_message,
    stdlib_sides,
)
from ._harness import Comparison, Profile, Scenario
from ._measure import interleave
from ._redis_pipeline import RawCeiling, redis_url, run_ours

__all__ = ["SCENARIOS"]


def measure(profile: Profile) -> tuple[Comparison, ...]:
    """Speedup over serial: a Redis topic's 2 workers vs the best stdlib pool (and vs the
    raw redis-py fan-out)."""
    messages, iterations = fanout_messages(profile, 4_000)
    with redis_url() as url, stdlib_sides(messages, iterations) as sides, \
            Bus(redis=url) as bus, \
            closing(RawCeiling(url, partial(spin_message, iterations))) as raw:
        topic: Any = bus.create_topic(f"bench-redis-fanout-{uuid.uuid4().hex[:8]}",
                                      backend="redis")
        try:
            topic.subscribe(partial(spin_delivery, iterations), group="g", workers=2,
                            auto_ack=True)
            publisher = topic.publisher()
            sides["ours"] = partial(seconds, partial(run_ours, topic, publisher, messages))
            sides["publish1"] = partial(seconds, partial(publish_each, topic, messages))
            sides["raw"] = partial(seconds, partial(raw.run, messages))
            medians = interleave(sides, repeats=profile.repeats)
            publisher.close()
        finally:
            topic.destroy()
    ours = speedups(medians)
    one_at_a_time = speedups({**medians, "ours": medians["publish1"]})
    ceiling = speedups({**medians, "ours": medians["raw"]})
    return (ours,
            replace(one_at_a_time, suffix="publish1", target=None,
                    baseline="best stdlib pool speedup; ours with topic.publish one at a time"),
            replace(ours, suffix="raw", target=None, baseline_value=ceiling.value,
                    baseline="raw redis-py fan-out: XADD x100, 2 procs XREADGROUP 100 + XACK"))


SCENARIOS = (
    Scenario(name="redis_fanout_cpu", unit="x",
             baseline="best speedup of fork ProcessPoolExecutor/mp.Pool(2), ~200 us handler",
             target=0.9, measure=measure),
)
