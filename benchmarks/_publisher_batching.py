"""The Publisher with default batching vs with batching off (``batching``).

Both Publishers feed the same kind of topic, read by a ``workers=2`` group (two worker
processes, ``auto_ack``, a trivial handler): a consumer that keeps up with the batched
side, so the ratio is what batching saves the publishing side. A round times ``publish``
x N and ``flush`` -- the Publisher path up to the topic's confirmation -- then waits,
untimed, until everything is settled so the next round starts from an idle topic.
Batching off means ``max_messages=1, max_bytes=1, max_latency=0``: every message is its
own batch, with its own outcome (a local topic still gets up to 16 ready batches per
mailbox message: `runtime.publisher._actor.RUN`). That side publishes a tenth as many
messages per round (rates are compared, not times).

The extra row ``batching/thread`` (no target) runs the same two Publishers into one
acking thread member. That member holds at most 32 deliveries (the default prefetch,
`DESIGN.md` 3.4 rev. 2) and the group's bounded queue makes the batched side wait for
it, so its batched rate is the member's rate, not the Publisher's; it is a report-only
row, since it moves with the member's prefetch rather than with batching.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from runtime import BatchSettings, Publisher, Topic

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, per_second
from ._pipeline import TIMEOUT, acking_pipeline, settle

__all__ = ["SCENARIOS"]

UNBATCHED = BatchSettings(max_messages=1, max_bytes=1, max_latency=0)


def _publish_and_flush(publisher: Publisher, messages: list[bytes]) -> None:
    publish = publisher.publish
    for message in messages:
        publish(message)
    publisher.flush(TIMEOUT)


def _timed_round(topic: Topic[Any], publisher: Publisher, messages: list[bytes]) -> float:
    before = topic.stats().delivered
    rate = per_second(len(messages), partial(_publish_and_flush, publisher, messages))
    settle(topic, before, len(messages))
    return rate


def measure_batching(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second published and confirmed: default batching vs one per batch,
    into two worker processes (the main row) and into one acking thread member."""
    count = profile.count(100_000, minimum=1_000)
    messages = payloads(count)
    fewer = messages[:count // 10]
    with acking_pipeline("bench-batched", workers=2) as (batched_topic, batched), \
            acking_pipeline("bench-unbatched", workers=2, batching=UNBATCHED) as (
                unbatched_topic, unbatched), \
            acking_pipeline("bench-batched-t") as (batched_t_topic, batched_t), \
            acking_pipeline("bench-unbatched-t", batching=UNBATCHED) as (unbatched_t_topic, unbatched_t):
        medians = interleave({
            "batched": partial(_timed_round, batched_topic, batched, messages),
            "unbatched": partial(_timed_round, unbatched_topic, unbatched, fewer),
            "batched_t": partial(_timed_round, batched_t_topic, batched_t, messages),
            "unbatched_t": partial(_timed_round, unbatched_t_topic, unbatched_t, fewer),
        }, repeats=profile.repeats)
    return (
        Comparison(value=medians["batched"], baseline_value=medians["unbatched"]),
        Comparison(value=medians["batched_t"], baseline_value=medians["unbatched_t"],
                   suffix="thread", baseline="max_messages=1 (topic w/ 1 acking thread member)"),
    )


SCENARIOS = (
    Scenario(name="batching", unit="msg/s",
             baseline="max_messages=1 (publish+flush, topic w/ a workers=2 group)",
             target=10.0, measure=measure_batching),
)
