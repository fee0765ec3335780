"""One publish to 8 broadcast subscribers, cost per delivery (``broadcast_fanout``).

The candidate publishes through a default `Publisher` into a topic with 8 broadcast
subscribers (thread actors) that each ack; the round ends when nothing is pending, and
its time is divided by ``messages x 8`` deliveries. The topic's ``max_pending`` equals
its ring capacity so no subscriber can fall a ring behind (no ``lagged`` drops: every
delivery is really handled). The baseline tells every message to each of 8 bare pykka
actors and asks each once at the end. Report only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import pykka

from runtime import Bus, Publisher, Topic

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, seconds_per
from ._pipeline import TIMEOUT, acknowledge, run_pipeline
from ._thread_actors import PykkaCounter

__all__ = ["SCENARIOS"]

_SUBSCRIBERS = 8
_RING = 1024


@contextmanager
def _fanout_topic() -> Iterator[tuple[Topic[Any], Publisher]]:
    with Bus() as bus:
        topic = bus.create_topic("bench-fanout", broadcast_capacity=_RING, max_pending=_RING)
        for _ in range(_SUBSCRIBERS):
            topic.subscribe(acknowledge)
        yield topic, topic.publisher()


@contextmanager
def _pykka_counters() -> Iterator[list[pykka.ActorRef[PykkaCounter]]]:
    with ExitStack() as stack:
        refs = []
        for _ in range(_SUBSCRIBERS):
            ref = PykkaCounter.start()
            stack.callback(ref.stop, timeout=TIMEOUT)
            refs.append(ref)
        yield refs


def _run_ours(topic: Topic[Any], publisher: Publisher, messages: list[bytes]) -> None:
    run_pipeline(topic, publisher, messages)
    if topic.stats().lagged:
        raise RuntimeError("a broadcast subscriber lagged: deliveries were dropped")


def _run_pykka(refs: list[pykka.ActorRef[PykkaCounter]], messages: list[bytes]) -> None:
    tells = [ref.tell for ref in refs]
    for message in messages:
        for tell in tells:
            tell(message)
    for ref in refs:
        ref.ask(None, block=False).get(timeout=TIMEOUT)


def measure_fanout(profile: Profile) -> Comparison:
    """Microseconds per delivery: 8 broadcast subscribers vs 8 pykka actors."""
    count = profile.count(20_000, minimum=200)
    deliveries = count * _SUBSCRIBERS
    messages = payloads(count)
    with _pykka_counters() as refs, _fanout_topic() as (topic, publisher):
        medians = interleave({
            "ours": lambda: seconds_per(deliveries, partial(_run_ours, topic, publisher, messages)),
            "pykka": lambda: seconds_per(deliveries, partial(_run_pykka, refs, messages)),
        }, repeats=profile.repeats)
    return Comparison(value=medians["ours"] * 1e6, baseline_value=medians["pykka"] * 1e6)


SCENARIOS = (
    Scenario(name="broadcast_fanout", unit="us", baseline="8 pykka actors, each told each message",
             target=None, measure=measure_fanout, higher_is_better=False),
)
