"""CPU-bound work over a process pool of every core vs a pool of one (``cpu_scaling``).

The handler is a pure-Python loop of about 2 ms, so the GIL of each worker is the limit
and the speedup shows how well the pool spreads work over processes. On a machine with
one or two shared cores the speedup is near 1 or 2 at best; that is expected. The extra
row ``cpu_scaling/raw`` compares the pool of every core with the same number of raw
processes that are told only how many tasks to run (no per-task messages): the
practical limit of this machine.

``fanout_cpu`` publishes messages one at a time (``topic.publish``) to a ``workers=2``
group whose handler spins about 200 us per message, and compares its speedup over the
same work run serially with the best speedup of the standard library's pools in their
best configuration (fork ``ProcessPoolExecutor(2).map`` and ``mp.Pool(2).imap_unordered``,
given every message at once, chunks of 25), all in the same rounds.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from actors import Actor, ActorSystem, Pool
from runtime import Bus, Delivery

from ._harness import Comparison, Profile, Scenario
from ._measure import Round, interleave, payloads, per_second
from ._raw_pipe import PROTOCOL, raw_process

__all__ = ["FANOUT_SCENARIOS", "SCENARIOS", "fanout_messages", "iterations_per_task",
           "publish_each", "seconds", "speedups", "spin", "spin_child", "spin_delivery", "spin_message",
           "stdlib_sides"]

_TIMEOUT = 120.0
_TASK_SECONDS = 0.002
_CALIBRATION_ITERATIONS = 50_000
_FANOUT_SECONDS = 200e-6
_FANOUT_CHUNK = 25


def spin(iterations: int) -> int:
    """Burn CPU in pure Python for ``iterations`` steps; returns a checksum."""
    total = 0
    for number in range(iterations):
        total += number * number % 7
    return total


def spin_child(conn: Connection) -> None:
    """Run ``(tasks, iterations)`` requests of `spin` and answer each with ``tasks``; None ends."""
    while True:
        request = pickle.loads(conn.recv_bytes())
        if request is None:
            return
        tasks, iterations = request
        for _ in range(tasks):
            spin(iterations)
        conn.send_bytes(pickle.dumps(tasks, protocol=PROTOCOL))


class Burner(Actor):
    """Spins for the number of iterations it is sent."""

    def on_receive(self, message: Any) -> int:
        return spin(int(message))


def spin_message(iterations: int, message: bytes) -> int:
    """The stdlib pools' and the serial side's work on one message."""
    return spin(iterations) + len(message)


def spin_delivery(iterations: int, delivery: Delivery[Any]) -> None:
    """The workers' handler: the same work (``auto_ack`` acks on return)."""
    spin(iterations)


def iterations_per_task(seconds: float = _TASK_SECONDS) -> int:
    """How many `spin` steps take about ``seconds`` here (best of three)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        spin(_CALIBRATION_ITERATIONS)
        best = min(best, time.perf_counter() - start)
    return max(1, int(_CALIBRATION_ITERATIONS * seconds / best))


def _run_tasks(pool: Pool, tasks: int, iterations: int) -> None:
    futures = [pool.ask(iterations, timeout=None) for _ in range(tasks)]
    for future in futures:
        future.result(_TIMEOUT)


def _run_raw(conns: list[Connection], tasks: int, iterations: int) -> None:
    shares = [tasks // len(conns) + (index < tasks % len(conns)) for index in range(len(conns))]
    for conn, share in zip(conns, shares, strict=True):
        conn.send_bytes(pickle.dumps((share, iterations), protocol=PROTOCOL))
    done = sum(int(pickle.loads(conn.recv_bytes())) for conn in conns)
    if done != tasks:
        raise RuntimeError(f"raw workers ran {done} of {tasks} tasks")


def measure_scaling(profile: Profile) -> tuple[Comparison, ...]:
    """Tasks per second on ``os.cpu_count()`` workers vs on one; the ratio is the speedup."""
    tasks = profile.count(480, minimum=8)
    iterations = iterations_per_task()
    workers = os.cpu_count() or 1
    with ActorSystem("bench-scaling") as system, ExitStack() as raw:
        one = system.pool(Burner, size=1, process=True, name="one")
        every = system.pool(Burner, size=workers, process=True, name="every")
        conns = [raw.enter_context(raw_process(spin_child, system.start_method))
                 for _ in range(workers)]
        medians = interleave({
            "every": lambda: per_second(tasks, partial(_run_tasks, every, tasks, iterations)),
            "one": lambda: per_second(tasks, partial(_run_tasks, one, tasks, iterations)),
            "raw": lambda: per_second(tasks, partial(_run_raw, conns, tasks, iterations)),
        }, repeats=profile.repeats)
    return (
        Comparison(value=medians["every"], baseline_value=medians["one"]),
        Comparison(value=medians["every"], baseline_value=medians["raw"], suffix="raw",
                   baseline=f"{workers} raw processes, no per-task messages"),
    )


def _serial(messages: list[bytes], iterations: int) -> None:
    for message in messages:
        spin_message(iterations, message)


def publish_each(topic: Any, messages: list[bytes]) -> None:
    """``topic.publish`` every message, one at a time, then wait until nothing is pending."""
    publish = topic.publish
    for message in messages:
        publish(message)
    if not topic.join(_TIMEOUT):
        raise RuntimeError(f"{topic.name}: messages still pending")


def seconds(work: Any) -> float:
    """How long ``work()`` takes, in seconds."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def fanout_messages(profile: Profile, full: int = 2_000) -> tuple[list[bytes], int]:
    """The messages of a fan-out round and the `spin` steps of about 200 us here."""
    return payloads(profile.count(full, minimum=40)), iterations_per_task(_FANOUT_SECONDS)


@contextmanager
def stdlib_sides(messages: list[bytes], iterations: int) -> Iterator[dict[str, Round]]:
    """The serial round and the best configuration of the standard library's pools (fork
    ``ProcessPoolExecutor(2).map`` and ``mp.Pool(2).imap_unordered``, every message at
    once, chunks of 25) as timed rounds. Enter it before anything starts threads: it
    forks its children at once."""
    work = partial(spin_message, iterations)
    context = multiprocessing.get_context("fork")
    with ExitStack() as stack:
        executor = stack.enter_context(ProcessPoolExecutor(2, mp_context=context))
        list(executor.map(work, messages[:2]))
        pool = context.Pool(2)
        stack.callback(pool.join)
        stack.callback(pool.close)
        yield {
            "serial": lambda: seconds(partial(_serial, messages, iterations)),
            "executor": lambda: seconds(lambda: list(
                executor.map(work, messages, chunksize=_FANOUT_CHUNK))),
            "pool": lambda: seconds(lambda: list(
                pool.imap_unordered(work, messages, chunksize=_FANOUT_CHUNK))),
        }


def speedups(medians: dict[str, float]) -> Comparison:
    """Our speedup over serial (side ``ours``) against the best stdlib pool's."""
    best = min(medians["executor"], medians["pool"])
    return Comparison(value=medians["serial"] / medians["ours"],
                      baseline_value=medians["serial"] / best)


def measure_fanout_cpu(profile: Profile) -> Comparison:
    """Speedup over serial: topic.publish one at a time to 2 workers vs the best stdlib pool."""
    messages, iterations = fanout_messages(profile)
    # fork every baseline child before the bus starts threads
    with stdlib_sides(messages, iterations) as sides, Bus() as bus:
        topic = bus.create_topic("bench-fanout-cpu")
        topic.subscribe(partial(spin_delivery, iterations), group="g", workers=2, auto_ack=True)
        sides["ours"] = lambda: seconds(partial(publish_each, topic, messages))
        medians = interleave(sides, repeats=profile.repeats)
    return speedups(medians)


FANOUT_SCENARIOS = (
    Scenario(name="fanout_cpu", unit="x",
             baseline="best speedup of fork ProcessPoolExecutor/mp.Pool(2), ~200 us handler",
             target=0.9, measure=measure_fanout_cpu),
)

SCENARIOS = (
    Scenario(name="cpu_scaling", unit="tasks/s",
             baseline=f"pool size=1 (vs size={os.cpu_count() or 1}, 2 ms tasks)",
             target=None, measure=measure_scaling),
)
