"""The Publisher with default batching vs with batching off (``batching``).

Both Publishers feed the same kind of topic: one balanced thread member that acks (the
realistic case: a publisher with nobody reading is not what users run). A round times
``publish`` x N and ``flush`` -- the Publisher path up to the topic's confirmation --
then waits, untimed, until the member settled everything so the next round starts
from an idle topic. Batching off means ``max_messages=1, max_bytes=1, max_latency=0``:
every message is its own batch, with its own outcome (a local topic still gets up to
16 ready batches per mailbox message: `runtime.publisher._sending.RUN`). That side
publishes a tenth as many messages per round (rates are compared, not times).
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


def measure_batching(profile: Profile) -> Comparison:
    """Messages per second published and confirmed: default batching vs one per batch."""
    count = profile.count(100_000, minimum=1_000)
    messages = payloads(count)
    with acking_pipeline("bench-batched") as (batched_topic, batched), \
            acking_pipeline("bench-unbatched", batching=UNBATCHED) as (unbatched_topic, unbatched):
        medians = interleave({
            "batched": partial(_timed_round, batched_topic, batched, messages),
            "unbatched": partial(_timed_round, unbatched_topic, unbatched, messages[:count // 10]),
        }, repeats=profile.repeats)
    return Comparison(value=medians["batched"], baseline_value=medians["unbatched"])


SCENARIOS = (
    Scenario(name="batching", unit="msg/s",
             baseline="max_messages=1 (publish+flush, topic w/ 1 acking member)",
             target=10.0, measure=measure_batching),
)
