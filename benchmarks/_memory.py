"""Peak RSS growth while a Publisher outruns its subscriber under flow control.

``memory_flow_control``: a Publisher with ``FlowControl(max_outstanding_bytes=16 MiB)``
(default batching) publishes 200,000 distinct 1 KiB messages into a topic whose one
balanced thread member spends about 20 us per delivery before acking -- slower than the
publisher, so without flow control the backlog would hold every message. The figure is
the peak resident set size during the run minus the RSS just before the first publish:
sampled with psutil every millisecond by a thread, and never less than what the kernel's
high-water mark (``ru_maxrss``) says. The run happens in a fresh interpreter
(``python -c``) so earlier scenarios' heaps do not blur it; the child prints one JSON
line. The target is at most 64 MiB: ``ratio = 64 MiB / growth``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from runtime import Bus, Delivery, FlowControl, Publisher

from ._harness import Comparison, Profile, Scenario

__all__ = ["SCENARIOS", "run_child"]

MIB = 1024 * 1024
LIMIT_BYTES = 16 * MIB
BOUND_MIB = 64.0
_MESSAGE_BYTES = 1024
_HANDLER_SECONDS = 20e-6
_SAMPLE_SECONDS = 0.001
_TIMEOUT = 300.0


def slow_ack(delivery: Delivery[Any]) -> None:
    """The slow member's handler: busy for about 20 us, then ack."""
    until = time.perf_counter() + _HANDLER_SECONDS
    while time.perf_counter() < until:
        pass
    delivery.ack()


class _Sampler:
    """A thread that records the peak RSS and the Publisher's peak outstanding bytes."""

    def __init__(self, publisher: Publisher) -> None:
        self._process = psutil.Process()
        self._publisher = publisher
        self.peak_rss = self._process.memory_info().rss
        self.peak_outstanding = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss-sampler", daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(_TIMEOUT)

    def _run(self) -> None:
        memory_info = self._process.memory_info
        while not self._stop.wait(_SAMPLE_SECONDS):
            self.peak_rss = max(self.peak_rss, memory_info().rss)
            self.peak_outstanding = max(self.peak_outstanding, self._publisher.outstanding[1])


def _feed(publisher: Publisher, messages: int) -> None:
    publish = publisher.publish
    repeats = _MESSAGE_BYTES // 8
    for number in range(messages):
        publish(number.to_bytes(8, "big") * repeats)
    publisher.flush(_TIMEOUT)


def run_child(messages: int) -> dict[str, float]:
    """Publish ``messages`` x 1 KiB through the slow member; returns the figures (bytes, s)."""
    with Bus() as bus:
        topic = bus.create_topic("bench-memory")
        topic.subscribe(slow_ack, group="slow")
        publisher = topic.publisher(flow_control=FlowControl(max_outstanding_bytes=LIMIT_BYTES))
        start_rss = psutil.Process().memory_info().rss
        high_water_before = _high_water()
        started = time.perf_counter()
        with _Sampler(publisher) as sampler:
            _feed(publisher, messages)
            if not topic.join(_TIMEOUT):
                raise RuntimeError("memory_flow_control: messages still pending")
        seconds = time.perf_counter() - started
        delivered = topic.stats().delivered
    # The high-water mark counts only if the run raised it (imports may have set it).
    high_water = _high_water()
    peak = max(sampler.peak_rss, high_water if high_water > high_water_before else 0)
    return {"growth": peak - start_rss, "seconds": seconds,
            "delivered": delivered, "peak_outstanding": sampler.peak_outstanding}


def _high_water() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _in_fresh_interpreter(messages: int) -> dict[str, float]:
    code = ("import json, sys; from benchmarks._memory import run_child; "
            f"print(json.dumps(run_child({messages})))")
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
        capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"child exited {completed.returncode}: {completed.stderr[-500:]}")
    figures: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return figures


def measure_memory(profile: Profile) -> Comparison:
    """Peak RSS growth in MiB next to the 64 MiB bound.

    Raises:
        RuntimeError: the child failed, lost messages, or (with enough messages to
            matter) the subscriber never held the publisher back.
    """
    messages = profile.count(200_000, minimum=1_000)
    figures = _in_fresh_interpreter(messages)
    if figures["delivered"] != messages:
        raise RuntimeError(f"{figures['delivered']} of {messages} messages were acked")
    if messages * _MESSAGE_BYTES > 2 * LIMIT_BYTES and figures["peak_outstanding"] < LIMIT_BYTES / 2:
        raise RuntimeError("the subscriber never held the publisher back: flow control untested")
    return Comparison(value=figures["growth"] / MIB, baseline_value=BOUND_MIB)


SCENARIOS = (
    Scenario(name="memory_flow_control", unit="MiB",
             baseline="bound: 64 MiB (1 KiB msgs, 16 MiB flow control)",
             target=1.0, measure=measure_memory, higher_is_better=False),
)
