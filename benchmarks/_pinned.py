"""``pipeline_pool``'s paths with the parent's threads kept on one CPU (``pipeline_pinned``).

The parent of a pool (ours, and the standard library's) is a set of Python threads that
take turns with the GIL. Spread by the OS over every CPU, they pass it between CPUs.
`actors.pin_threads` keeps every thread of the process on one CPU and gives process
actors started later the CPUs the process had (nothing pins by default: the docs'
operations page, "Tuning a high-rate publisher").

Each round of a pinned side pins every thread of this interpreter (the executor's own
threads too) and unpins them after it; its workers were started before, on every CPU.
Rows: ours pinned against the executor pinned (the main row), ours pinned against ours
as it comes (the gain), and the 16-key paths pinned against the plain path pinned (the
no-cliffs ratios of ``pipeline_pool``, under this setting). It runs in a fresh
interpreter, as ``pipeline_tuned`` does, so that no pin outlives it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from actors import pin_threads, unpin_threads
from runtime import FlowControl

from ._child import run_medians
from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, per_second
from ._pipeline import run_pipeline
from ._pipeline_pool import executor_and_topic, run_executor, run_ordered

__all__ = ["SCENARIOS", "measure_pinned", "run_pinned"]


def _pinned(count: int, work: Callable[[], Any]) -> float:
    """One round of ``work`` with every thread on one CPU; the rate of ``count`` messages."""
    pin_threads()
    try:
        return per_second(count, work)
    finally:
        unpin_threads()


def run_pinned(count: int, repeats: int) -> dict[str, float]:
    """Each side's median rate in this interpreter, pinned rounds alternating with the rest."""
    messages = payloads(count)
    with executor_and_topic("bench-pipeline-pinned") as (executor, topic):
        plain = partial(run_pipeline, topic, topic.publisher(), messages)
        ordered = partial(run_ordered, topic, topic.publisher(message_ordering=True), messages)
        ordered_fc = partial(run_ordered, topic, topic.publisher(
            message_ordering=True, flow_control=FlowControl(max_outstanding_messages=1000),
        ), messages)
        return interleave({
            "ours": partial(_pinned, count, plain),
            "free": partial(per_second, count, plain),
            "ordered": partial(_pinned, count, ordered),
            "ordered_fc": partial(_pinned, count, ordered_fc),
            "executor": partial(_pinned, count, partial(run_executor, executor, messages)),
        }, repeats=repeats)


def measure_pinned(profile: Profile) -> tuple[Comparison, ...]:
    """The pinned rates next to their baselines, from a fresh interpreter.

    Raises:
        RuntimeError: the child failed (`ChildFailed`), or did not finish within its timeout.
    """
    count = profile.count(100_000, minimum=1_000)
    medians = run_medians("_pinned", "run_pinned", count, profile.repeats, profile.name,
                          "the pinned pipeline")
    ours = medians["ours"]
    return (
        Comparison(value=ours, baseline_value=medians["executor"]),
        Comparison(value=ours, baseline_value=medians["free"], suffix="free",
                   baseline="ours, the parent's threads as the OS places them"),
        Comparison(value=medians["ordered"], baseline_value=ours, suffix="ordered",
                   baseline="the plain path pinned (16 keys, message_ordering)"),
        Comparison(value=medians["ordered_fc"], baseline_value=ours, suffix="ordered_fc",
                   baseline="the plain path pinned (16 keys, FlowControl 1000 msgs)"),
    )


SCENARIOS = (
    Scenario(name="pipeline_pinned", unit="msg/s",
             baseline="fork ProcessPoolExecutor(2).map(chunksize=100), its parent pinned too",
             target=None, measure=measure_pinned),
)
