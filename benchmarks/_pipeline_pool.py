"""The tracked pipeline into a ``workers=2`` group vs process pools (``pipeline_pool``).

The candidate is `benchmarks._pipeline`'s pipeline with the member replaced by two
worker processes (``subscribe(ignore, group=..., workers=2, auto_ack=True)``; the bus
starts them with forkserver). The baselines are what a user would otherwise write, each
in its best configuration: ``multiprocessing.Pool(2).imap_unordered(chunksize=100)``
and ``ProcessPoolExecutor(2).map(chunksize=100)``, both with the **fork** start method
(on CPython 3.11 a forkserver Pool is about 70x slower on tiny messages: its result
thread spins), and, as the practical limit (extra row ``pipeline_pool/queue``), two fork
processes fed lists of 100 through a ``multiprocessing.Queue`` that answer each list
with its length.

Every side hands the same 16-byte message to the same trivial function. The fork
children are started before the bus starts its threads.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import partial
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool
from multiprocessing.queues import Queue
from typing import Any

from runtime import Bus, Delivery, Publisher, Topic

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, per_second
from ._pipeline import PAYLOAD, TIMEOUT, run_pipeline

__all__ = ["SCENARIOS", "ignore", "queue_worker", "touch"]

_WORKERS = 2
_CHUNK = 100


def touch(message: bytes) -> None:
    """The baselines' per-message work: nothing (the handler is trivial)."""


def ignore(delivery: Delivery[Any]) -> None:
    """The workers' handler: nothing (``auto_ack`` acks on return)."""


def queue_worker(inbox: Queue[list[bytes] | None], outbox: Queue[int]) -> None:
    """Handle every message of each list from ``inbox``; answer with its length; None ends."""
    while True:
        batch = inbox.get()
        if batch is None:
            return
        for message in batch:
            touch(message)
        outbox.put(len(batch))


class _QueueWorkers:
    """Fork processes running `queue_worker` on one shared pair of queues."""

    def __init__(self, context: BaseContext, workers: int) -> None:
        self._inbox: Queue[list[bytes] | None] = context.Queue()
        self._outbox: Queue[int] = context.Queue()
        self._processes = [
            context.Process(  # type: ignore[attr-defined]
                target=queue_worker, args=(self._inbox, self._outbox),
                name="bench-queue-worker", daemon=True)
            for _ in range(workers)
        ]
        for process in self._processes:
            process.start()

    def run(self, count: int) -> None:
        """Send ``count`` messages as lists of 100 and wait until every list was handled."""
        put = self._inbox.put
        for start in range(0, count, _CHUNK):
            put([PAYLOAD] * min(_CHUNK, count - start))
        done = 0
        while done < count:
            done += self._outbox.get(timeout=TIMEOUT)

    def close(self) -> None:
        """End the workers (kill those that do not end within 10 s) and the queues."""
        for _ in self._processes:
            self._inbox.put(None)
        for process in self._processes:
            process.join(10.0)
            if process.is_alive():
                process.kill()
                process.join(10.0)
        for queue in (self._inbox, self._outbox):
            queue.close()
            queue.join_thread()


@contextmanager
def _fork_baselines() -> Iterator[tuple[Pool, ProcessPoolExecutor, _QueueWorkers]]:
    """The three baselines, every child forked now (before any thread of the bus)."""
    context = multiprocessing.get_context("fork")
    with ExitStack() as stack:
        queue = _QueueWorkers(context, _WORKERS)
        stack.callback(queue.close)
        executor = stack.enter_context(ProcessPoolExecutor(_WORKERS, mp_context=context))
        list(executor.map(touch, [PAYLOAD] * _WORKERS))  # forks every worker now
        pool = context.Pool(_WORKERS)
        stack.callback(pool.join)
        stack.callback(pool.close)
        yield pool, executor, queue


def _run_pool(pool: Pool, count: int) -> None:
    handled = sum(1 for _ in pool.imap_unordered(touch, [PAYLOAD] * count, chunksize=_CHUNK))
    _check(handled, count)


def _run_executor(executor: ProcessPoolExecutor, count: int) -> None:
    handled = sum(1 for _ in executor.map(touch, [PAYLOAD] * count, chunksize=_CHUNK,
                                          timeout=TIMEOUT))
    _check(handled, count)


def _check(handled: int, count: int) -> None:
    if handled != count:
        raise RuntimeError(f"the baseline handled {handled} of {count} messages")


@contextmanager
def _worker_pipeline() -> Iterator[tuple[Topic[Any], Publisher]]:
    with Bus() as bus:
        topic = bus.create_topic("bench-pipeline-pool")
        topic.subscribe(ignore, group="workers", workers=_WORKERS, auto_ack=True)
        yield topic, topic.publisher()


def measure_pool(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second into 2 worker processes vs fork Pool, fork executor, fork Queue."""
    count = profile.count(100_000, minimum=1_000)
    with _fork_baselines() as (pool, executor, queue), _worker_pipeline() as (topic, publisher):
        medians = interleave({
            "ours": lambda: per_second(count, partial(run_pipeline, topic, publisher, count)),
            "pool": lambda: per_second(count, partial(_run_pool, pool, count)),
            "executor": lambda: per_second(count, partial(_run_executor, executor, count)),
            "queue": lambda: per_second(count, partial(queue.run, count)),
        }, repeats=profile.repeats)
    return (
        Comparison(value=medians["ours"], baseline_value=medians["pool"]),
        Comparison(value=medians["ours"], baseline_value=medians["executor"], suffix="executor",
                   baseline="fork ProcessPoolExecutor(2).map(chunksize=100)", target=1.0),
        Comparison(value=medians["ours"], baseline_value=medians["queue"], suffix="queue",
                   baseline="fork mp.Queue, 2 procs, lists of 100 (limit)"),
    )


SCENARIOS = (
    Scenario(name="pipeline_pool", unit="msg/s",
             baseline="fork mp.Pool(2).imap_unordered(chunksize=100)",
             target=1.0, measure=measure_pool),
)
