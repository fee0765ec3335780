"""Publish -> handler latency with ``max_latency=0.001`` (``latency``, ``latency/p99``).

One message at a time: stamp, ``publisher.publish``, wait for the handler (one balanced
thread member) to set an event; the sample is the handler's clock reading minus the
stamp. The first samples warm the path up and are dropped. Reported as ratios to the
latency targets (p50 at most 2 ms, p99 at most 10 ms): ``ratio = bound / measured``.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from runtime import BatchSettings, Bus, Delivery

from ._harness import Comparison, Profile, Scenario
from ._measure import payloads
from ._pipeline import TIMEOUT

__all__ = ["SCENARIOS", "Stopwatch"]

P50_BOUND_MS = 2.0
P99_BOUND_MS = 10.0
_WARMUP = 20


class Stopwatch:
    """The member's handler: records when it ran, acks, and wakes the publishing thread."""

    def __init__(self) -> None:
        self.arrived = 0.0
        self._event = threading.Event()

    def __call__(self, delivery: Delivery[Any]) -> None:
        self.arrived = time.perf_counter()
        delivery.ack()
        self._event.set()

    def wait(self) -> float:
        """Block until the handler ran (at most the benchmark timeout); returns when it ran.

        Raises:
            TimeoutError: the message did not arrive in time.
        """
        if not self._event.wait(TIMEOUT):
            raise TimeoutError(f"no delivery within {TIMEOUT} s")
        self._event.clear()
        return self.arrived


def _samples(count: int) -> list[float]:
    """``count`` publish -> handler latencies in milliseconds (after the warm-up)."""
    stopwatch = Stopwatch()
    samples: list[float] = []
    messages = payloads(_WARMUP + count)
    with Bus() as bus:
        topic = bus.create_topic("bench-latency")
        topic.subscribe(stopwatch, group="members")
        publisher = topic.publisher(batching=BatchSettings(max_latency=0.001))
        for index, message in enumerate(messages):
            started = time.perf_counter()
            publisher.publish(message)
            arrived = stopwatch.wait()
            if index >= _WARMUP:
                samples.append((arrived - started) * 1e3)
        if not topic.join(TIMEOUT):
            raise RuntimeError("latency: messages still pending at the end")
    return samples


def percentile(samples: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``samples`` (inclusive method, linear interpolation)."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[round(fraction * 100) - 1]


def measure_latency(profile: Profile) -> tuple[Comparison, ...]:
    """p50 and p99 of publish -> handler, in ms, each next to its bound."""
    samples = _samples(profile.count(1_000, minimum=20))
    return (
        Comparison(value=percentile(samples, 0.50), baseline_value=P50_BOUND_MS),
        Comparison(value=percentile(samples, 0.99), baseline_value=P99_BOUND_MS, suffix="p99",
                   baseline=f"bound: p99 <= {P99_BOUND_MS:g} ms", target=1.0),
    )


SCENARIOS = (
    Scenario(name="latency", unit="ms",
             baseline=f"bound: p50 <= {P50_BOUND_MS:g} ms (max_latency=1 ms)",
             target=1.0, measure=measure_latency, higher_is_better=False),
)
