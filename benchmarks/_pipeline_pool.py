"""The tracked pipeline into a ``workers=2`` group vs process pools (``pipeline_pool``).

The candidate is `benchmarks._pipeline`'s pipeline with the member replaced by two
worker processes (``subscribe(ignore, group=..., workers=2, auto_ack=True)``; the bus
starts them with forkserver). The baselines are what a user would otherwise write, each
in its best configuration: ``ProcessPoolExecutor(2).map(chunksize=100)`` (the main row)
and ``multiprocessing.Pool(2).imap_unordered(chunksize=100)``, both with the **fork**
start method (a forkserver Pool is far slower on tiny messages on CPython 3.11, its
result thread spins, and would make an unfair baseline); our own kernel, an
``ActorSystem.pool`` of two process actors asked once per list of 100 (``/kernel``,
untracked: the ceiling of the tracked path); and, as the practical limit (``/queue``),
two fork processes fed lists of 100 through a ``multiprocessing.Queue`` that answer each
list with its length.

Rows against the executor, in the same rounds: ``/kept`` (every future ``publish``
returns kept and its id read, as a user checking their publishes does) and ``/bulk``
(one ``Publisher.publish_many`` call for all the messages, its ids read). ``/futures``
compares ``/kept`` with its limit: one stdlib ``Future`` made per message, kept, resolved
and read, and nothing else (the interpreter's cost of keeping a future per message, its
collector included, which ``map``'s one future per chunk does not pay).
Rows against the plain path: ``/max_pending`` (a topic with
``max_pending=100000``, never reached), ``/ordered``
(``message_ordering`` with 16 keys) and ``/ordered_fc`` (the same under
``FlowControl(max_outstanding_messages=1000)``).
``/publish1`` publishes with ``topic.publish`` one message at a time against
``ProcessPoolExecutor.submit`` per message.

Every side sends distinct 100-byte messages (`benchmarks._measure.payloads`) to a trivial
function. The fork children are started before the bus starts its threads.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from functools import partial
from itertools import cycle
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool
from multiprocessing.queues import Queue
from typing import Any

from actors import Actor
from actors import Pool as ActorPool
from runtime import Bus, FlowControl, Publisher, Topic

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, per_second
from ._pipeline import TIMEOUT, ignore, run_pipeline, settle

__all__ = [
    "SCENARIOS", "BatchCounter", "Ours", "executor_and_topic", "ours", "queue_worker", "run_executor",
    "run_ordered", "touch",
]

_WORKERS = 2
_CHUNK = 100
_KEYS = 16


def touch(message: bytes) -> None:
    """The baselines' per-message work: nothing (the handler is trivial)."""


class BatchCounter(Actor):
    """Our kernel's side: handles each message of a list, answers with its length."""

    def on_receive(self, message: Any) -> int:
        for item in message:
            touch(item)
        return len(message)


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

    def run(self, messages: list[bytes]) -> None:
        """Send ``messages`` as lists of 100 and wait until every list was handled."""
        put = self._inbox.put
        for start in range(0, len(messages), _CHUNK):
            put(messages[start:start + _CHUNK])
        done = 0
        while done < len(messages):
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
        list(executor.map(touch, payloads(_WORKERS)))  # forks every worker now
        pool = context.Pool(_WORKERS)
        stack.callback(pool.join)
        stack.callback(pool.close)
        yield pool, executor, queue


@contextmanager
def executor_and_topic(name: str) -> Iterator[tuple[ProcessPoolExecutor, Topic[Any]]]:
    """A fork ``ProcessPoolExecutor(2)`` whose workers are forked first (before any thread
    of the bus), then topic ``name`` of a new bus, read by a ``workers=2`` group."""
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(_WORKERS, mp_context=context) as executor:
        list(executor.map(touch, payloads(_WORKERS)))  # forks every worker before the bus
        with Bus() as bus:
            topic = bus.create_topic(name)
            topic.subscribe(ignore, group="workers", workers=_WORKERS, auto_ack=True)
            yield executor, topic


def _run_pool(pool: Pool, messages: list[bytes]) -> None:
    handled = sum(1 for _ in pool.imap_unordered(touch, messages, chunksize=_CHUNK))
    _check(handled, len(messages))


def run_executor(executor: ProcessPoolExecutor, messages: list[bytes]) -> None:
    handled = sum(1 for _ in executor.map(touch, messages, chunksize=_CHUNK, timeout=TIMEOUT))
    _check(handled, len(messages))


def _submit_each(executor: ProcessPoolExecutor, messages: list[bytes]) -> None:
    futures = [executor.submit(touch, message) for message in messages]
    done, pending = wait(futures, timeout=TIMEOUT)
    _check(len(done) - len(pending), len(messages))


def _run_kernel(pool: ActorPool, messages: list[bytes]) -> None:
    futures = [pool.ask(messages[start:start + _CHUNK], timeout=TIMEOUT)
               for start in range(0, len(messages), _CHUNK)]
    _check(sum(future.result(TIMEOUT) for future in futures), len(messages))


def _publish_each(topic: Topic[Any], messages: list[bytes]) -> None:
    before = topic.stats().delivered
    publish = topic.publish
    for message in messages:
        publish(message)
    if not topic.join(TIMEOUT):
        raise RuntimeError(f"{topic.name}: still pending after {TIMEOUT} s")
    _check(topic.stats().delivered - before, len(messages))


def _run_kept(topic: Topic[Any], publisher: Publisher, messages: list[bytes]) -> None:
    """`run_pipeline`, keeping every future ``publish`` returns and reading its id."""
    before = topic.stats().delivered
    publish = publisher.publish
    futures = [publish(message) for message in messages]
    publisher.flush(TIMEOUT)
    settle(topic, before, len(messages))
    _check(len({future.result(0) for future in futures}), len(messages))


def _futures_only(messages: list[bytes]) -> None:
    """The limit of `_run_kept`: a future per message, kept, resolved with an id and read."""
    futures: list[Future[bytes]] = [Future() for _ in messages]
    for future, message in zip(futures, messages, strict=True):
        future.set_result(message[:12])
    _check(len({future.result(0) for future in futures}), len(messages))


def _run_bulk(topic: Topic[Any], publisher: Publisher, messages: list[bytes]) -> None:
    """`run_pipeline` with one ``publish_many`` call, reading every id it returns."""
    before = topic.stats().delivered
    ids = publisher.publish_many(messages).result(TIMEOUT)
    settle(topic, before, len(messages))
    _check(len(set(ids)), len(messages))


def run_ordered(topic: Topic[Any], publisher: Publisher, messages: list[bytes]) -> None:
    before = topic.stats().delivered
    publish = publisher.publish
    # Each message comes with its key, as a user's records would: the loop only pairs them
    # (an index and a modulo per message cost ~65 ns more, ~3% of a publish's share).
    for message, key in zip(messages, cycle([f"key-{n}" for n in range(_KEYS)])):
        publish(message, ordering_key=key)
    publisher.flush(TIMEOUT)
    if not topic.join(TIMEOUT):
        raise RuntimeError(f"{topic.name}: still pending after {TIMEOUT} s")
    _check(topic.stats().delivered - before, len(messages))


def _check(handled: int, count: int) -> None:
    if handled != count:
        raise RuntimeError(f"the baseline handled {handled} of {count} messages")


class Ours:
    """Our sides: the plain topic, one with ``max_pending``, ordered Publishers, the kernel."""

    def __init__(self, bus: Bus) -> None:
        self.topic = bus.create_topic("bench-pipeline-pool")
        self.topic.subscribe(ignore, group="workers", workers=_WORKERS, auto_ack=True)
        self.publisher = self.topic.publisher()
        self.keeping = self.topic.publisher()
        self.bulk = self.topic.publisher()
        self.ordered = self.topic.publisher(message_ordering=True)
        self.ordered_fc = self.topic.publisher(
            message_ordering=True, flow_control=FlowControl(max_outstanding_messages=1000),
        )
        self.bounded = bus.create_topic("bench-pipeline-pool-bounded", max_pending=100_000)
        self.bounded.subscribe(ignore, group="workers", workers=_WORKERS, auto_ack=True)
        self.bounded_publisher = self.bounded.publisher()
        self.kernel = bus.system.pool(BatchCounter, size=_WORKERS, process=True)


@contextmanager
def ours() -> Iterator[Ours]:
    """A bus with `Ours` on it, closed on exit."""
    with Bus() as bus:
        yield Ours(bus)


def _rate(messages: list[bytes], work: Any, *args: Any) -> Any:
    return lambda: per_second(len(messages), partial(work, *args, messages))


def measure_pool(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second into 2 worker processes vs the fork pools, our kernel, a Queue."""
    messages = payloads(profile.count(100_000, minimum=1_000))
    singles = payloads(profile.count(20_000, minimum=200))
    with _fork_baselines() as (pool, executor, queue), ours() as sides:
        medians = interleave({
            "ours": _rate(messages, run_pipeline, sides.topic, sides.publisher),
            "bounded": _rate(messages, run_pipeline, sides.bounded, sides.bounded_publisher),
            "kept": _rate(messages, _run_kept, sides.topic, sides.keeping),
            "bulk": _rate(messages, _run_bulk, sides.topic, sides.bulk),
            "futures": _rate(messages, _futures_only),
            "ordered": _rate(messages, run_ordered, sides.topic, sides.ordered),
            "ordered_fc": _rate(messages, run_ordered, sides.topic, sides.ordered_fc),
            "executor": _rate(messages, run_executor, executor),
            "pool": _rate(messages, _run_pool, pool),
            "kernel": _rate(messages, _run_kernel, sides.kernel),
            "queue": _rate(messages, queue.run),
            "publish1": _rate(singles, _publish_each, sides.topic),
            "submit1": _rate(singles, _submit_each, executor),
        }, repeats=profile.repeats)
    return _comparisons(medians)


def _comparisons(medians: dict[str, float]) -> tuple[Comparison, ...]:
    """The rows of `measure_pool`: ours against each baseline, the variants against ours."""
    ours_rate = medians["ours"]
    return (
        Comparison(value=ours_rate, baseline_value=medians["executor"]),
        Comparison(value=ours_rate, baseline_value=medians["pool"], suffix="pool",
                   baseline="fork mp.Pool(2).imap_unordered(chunksize=100)", target=1.0),
        Comparison(value=ours_rate, baseline_value=medians["kernel"], suffix="kernel",
                   baseline="our ActorSystem.pool(2), one ask per 100 (untracked)", target=0.5),
        Comparison(value=ours_rate, baseline_value=medians["queue"], suffix="queue",
                   baseline="fork mp.Queue, 2 procs, lists of 100 (limit)"),
        Comparison(value=medians["bounded"], baseline_value=ours_rate, suffix="max_pending",
                   baseline="the plain path (max_pending=100000 never reached)", target=0.7),
        Comparison(value=medians["kept"], baseline_value=medians["executor"], suffix="kept",
                   baseline="fork ProcessPoolExecutor(2).map (every future kept and read)",
                   target=0.6),
        Comparison(value=medians["kept"], baseline_value=medians["futures"], suffix="futures",
                   baseline="a stdlib Future per message, kept, set and read (limit of /kept)"),
        Comparison(value=medians["bulk"], baseline_value=medians["executor"], suffix="bulk",
                   baseline="fork ProcessPoolExecutor(2).map (publish_many, ids read)",
                   target=1.0),
        Comparison(value=medians["ordered"], baseline_value=ours_rate, suffix="ordered",
                   baseline="the plain path (16 keys, message_ordering)", target=0.8),
        Comparison(value=medians["ordered_fc"], baseline_value=ours_rate, suffix="ordered_fc",
                   baseline="the plain path (16 keys, FlowControl 1000 msgs)", target=0.7),
        Comparison(value=medians["publish1"], baseline_value=medians["submit1"], suffix="publish1",
                   baseline="fork ProcessPoolExecutor(2).submit per message", target=3.0),
    )


SCENARIOS = (
    Scenario(name="pipeline_pool", unit="msg/s",
             baseline="fork ProcessPoolExecutor(2).map(chunksize=100)",
             target=0.8, measure=measure_pool),
)
