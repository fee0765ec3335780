"""Thread actors against bare pykka: tell throughput (``actor_tell``) and ask latency (``actor_ask``).

Both sides run the same handler (count the message, answer with the count) on one
actor thread each; both actors live for the whole scenario and take turns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pykka

from actors import Actor, ActorSystem, Ref

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, per_second, seconds_per

__all__ = ["SCENARIOS"]

_DRAIN_TIMEOUT = 60.0


class Counter(Actor):
    """Counts what it receives; answers an ask with the count so far."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: Any) -> int:
        self.count += 1
        return self.count


class PykkaCounter(pykka.ThreadingActor):
    """The same handler on a bare pykka actor."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: Any) -> int:
        self.count += 1
        return self.count


@contextmanager
def _pykka_counter() -> Iterator[pykka.ActorRef[PykkaCounter]]:
    ref = PykkaCounter.start()
    try:
        yield ref
    finally:
        ref.stop(timeout=_DRAIN_TIMEOUT)


def _tell_ours(ref: Ref, count: int) -> None:
    tell = ref.tell
    before = ref.ask(None, timeout=None).result(_DRAIN_TIMEOUT)
    for number in range(count):
        tell(number)
    _check_count(before, ref.ask(None, timeout=None).result(_DRAIN_TIMEOUT), count)


def _tell_pykka(ref: pykka.ActorRef[PykkaCounter], count: int) -> None:
    tell = ref.tell
    before = ref.ask(None, block=False).get(timeout=_DRAIN_TIMEOUT)
    for number in range(count):
        tell(number)
    _check_count(before, ref.ask(None, block=False).get(timeout=_DRAIN_TIMEOUT), count)


def _check_count(before: int, after: int, count: int) -> None:
    if after - before != count + 1:
        raise RuntimeError(f"the actor handled {after - before - 1} of {count} messages")


def _ask_ours(ref: Ref, count: int) -> None:
    ask = ref.ask
    for number in range(count):
        ask(number).result(_DRAIN_TIMEOUT)


def _ask_pykka(ref: pykka.ActorRef[PykkaCounter], count: int) -> None:
    ask = ref.ask
    for number in range(count):
        ask(number, block=False).get(timeout=_DRAIN_TIMEOUT)


def measure_tell(profile: Profile) -> Comparison:
    """Messages per second: ``count`` tells, then one ask that waits for the drain."""
    count = profile.count(200_000, minimum=200)
    with ActorSystem("bench-tell") as system, _pykka_counter() as theirs:
        ours = system.spawn(Counter, name="counter")
        medians = interleave({
            "ours": lambda: per_second(count, partial(_tell_ours, ours, count)),
            "pykka": lambda: per_second(count, partial(_tell_pykka, theirs, count)),
        }, repeats=profile.repeats)
    return Comparison(value=medians["ours"], baseline_value=medians["pykka"])


def measure_ask(profile: Profile) -> Comparison:
    """Microseconds per sequential ask round trip (default ask timeout on our side)."""
    count = profile.count(20_000, minimum=100)
    with ActorSystem("bench-ask") as system, _pykka_counter() as theirs:
        ours = system.spawn(Counter, name="counter")
        medians = interleave({
            "ours": lambda: seconds_per(count, partial(_ask_ours, ours, count)),
            "pykka": lambda: seconds_per(count, partial(_ask_pykka, theirs, count)),
        }, repeats=profile.repeats)
    return Comparison(value=medians["ours"] * 1e6, baseline_value=medians["pykka"] * 1e6)


SCENARIOS = (
    Scenario(name="actor_tell", unit="msg/s", baseline="pykka tell", target=1.0,
             measure=measure_tell),
    Scenario(name="actor_ask", unit="us", baseline="pykka ask", target=1.0,
             measure=measure_ask, higher_is_better=False),
)
