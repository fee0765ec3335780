"""CPU-bound work fanned out over a Redis topic's ``workers=2`` group (``redis_fanout_cpu``).

The same measurement as ``fanout_cpu`` on a ``backend="redis"`` topic: messages are
published one at a time (``topic.publish``) to a group of two worker processes whose
handler spins about 200 us per message and acks in Redis; a round ends when
``topic.join`` sees nothing pending. Its speedup over the same work run serially is
compared with the best speedup of the standard library's pools in their best
configuration (fork ``ProcessPoolExecutor(2).map`` and ``mp.Pool(2).imap_unordered``,
given every message at once, chunks of 25), all in the same rounds. Target 0.9. The
Redis is the one of ``redis_pipeline`` (``ACTORBUS_BENCH_REDIS``, or a redis-server of
its own); without one the row is skipped with the reason.
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any

from runtime import Bus

from ._cpu_scaling import fanout_messages, publish_each, speedups, spin_delivery, stdlib_sides
from ._harness import Comparison, Profile, Scenario
from ._measure import interleave
from ._redis_pipeline import redis_url

__all__ = ["SCENARIOS"]


def _seconds_of(topic: Any, messages: list[bytes]) -> float:
    start = time.perf_counter()
    publish_each(topic, messages)
    return time.perf_counter() - start


def measure(profile: Profile) -> Comparison:
    """Speedup over serial: a Redis topic's 2 workers vs the best stdlib pool."""
    messages, iterations = fanout_messages(profile, 4_000)
    with redis_url() as url, stdlib_sides(messages, iterations) as sides, \
            Bus(redis=url) as bus:
        topic: Any = bus.create_topic(f"bench-redis-fanout-{uuid.uuid4().hex[:8]}",
                                      backend="redis")
        try:
            topic.subscribe(partial(spin_delivery, iterations), group="g", workers=2,
                            auto_ack=True)
            sides["ours"] = partial(_seconds_of, topic, messages)
            medians = interleave(sides, repeats=profile.repeats)
        finally:
            topic.destroy()
    return speedups(medians)


SCENARIOS = (
    Scenario(name="redis_fanout_cpu", unit="x",
             baseline="best speedup of fork ProcessPoolExecutor/mp.Pool(2), ~200 us handler",
             target=0.9, measure=measure),
)
