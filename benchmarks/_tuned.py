"""The ``workers=2`` pipeline with the collector a high-rate application would set (``pipeline_tuned``).

``pipeline_pool`` runs every side with the interpreter as it comes. The collector's
settings belong to the application rather than to the library, and the docs' operations
page ("Tuning a high-rate publisher") recommends them: ``gc.freeze()`` after start-up and
``gc.set_threshold(20_000, 10, 10)``, so that the collector does not walk the start-up
heap and the application's data in every full collection, nor start a young one every few
hundred messages. This row runs
``pipeline_pool``'s plain path (default Publisher batches of 100) next to fork
``ProcessPoolExecutor(2).map(chunksize=100)``, both in one interpreter with those
settings. Batch size is left as ``pipeline_pool`` has it on both sides: a larger one helps
the executor more than us.

It runs in a fresh interpreter, so the collector settings it makes reach no other
scenario; both sides alternate there as everywhere else (`interleave`).
"""

from __future__ import annotations

import gc
from functools import partial

from ._child import run_medians
from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, per_second
from ._pipeline import run_pipeline
from ._pipeline_pool import executor_and_topic, run_executor

__all__ = ["SCENARIOS", "measure_tuned", "run_tuned"]

_THRESHOLDS = (20_000, 10, 10)


def run_tuned(count: int, repeats: int) -> dict[str, float]:
    """Both sides' median rates in this interpreter, with the collector tuned after start-up.

    Changes this interpreter's collector for good: call it in a process of its own.
    """
    messages = payloads(count)
    with executor_and_topic("bench-pipeline-tuned") as (executor, topic):
        publisher = topic.publisher()
        gc.collect()
        gc.freeze()
        gc.set_threshold(*_THRESHOLDS)
        return interleave({
            "ours": lambda: per_second(count, partial(run_pipeline, topic, publisher, messages)),
            "executor": lambda: per_second(count, partial(run_executor, executor, messages)),
        }, repeats=repeats)


def measure_tuned(profile: Profile) -> Comparison:
    """Our pipeline's rate next to the executor's, both with the collector tuned, from a
    fresh interpreter.

    Raises:
        RuntimeError: the child failed (`ChildFailed`), or did not finish within its timeout.
    """
    count = profile.count(100_000, minimum=1_000)
    medians = run_medians("_tuned", "run_tuned", count, profile.repeats, profile.name,
                          "the tuned pipeline")
    return Comparison(value=medians["ours"], baseline_value=medians["executor"])


SCENARIOS = (
    Scenario(name="pipeline_tuned", unit="msg/s",
             baseline="fork ProcessPoolExecutor(2).map(chunksize=100), same tuned interpreter",
             target=None, measure=measure_tuned),
)
