"""Process actors against a raw ``multiprocessing.Pipe``: ``process_roundtrip``, ``process_batched``.

The baseline is what a user would hand-write (see `benchmarks._raw_pipe`), started with
the actor system's own start method (forkserver on Linux). Report only: the actor adds
supervision, crash detection and dead letters that the raw pipe does not have.
"""

from __future__ import annotations

import pickle
from functools import partial
from multiprocessing.connection import Connection

from actors import ActorSystem, Ref

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, per_second, seconds_per
from ._raw_pipe import PROTOCOL, counting_child, echo_child, raw_process, send_batched
from ._thread_actors import Counter

__all__ = ["SCENARIOS"]

_TIMEOUT = 60.0
_BATCH = 100


def _roundtrip_ours(ref: Ref, count: int) -> None:
    ask = ref.ask
    for number in range(count):
        ask(number).result(_TIMEOUT)


def _roundtrip_raw(conn: Connection, count: int) -> None:
    send, receive = conn.send_bytes, conn.recv_bytes
    dumps, loads = pickle.dumps, pickle.loads
    for number in range(count):
        send(dumps(number, protocol=PROTOCOL))
        loads(receive())


def _tells_ours(ref: Ref, count: int) -> None:
    tell = ref.tell
    before = ref.ask(None, timeout=None).result(_TIMEOUT)
    for number in range(count):
        tell(number)
    after = ref.ask(None, timeout=None).result(_TIMEOUT)
    _check_count(after - before - 1, count)


def _tells_raw(conn: Connection, count: int, state: list[int]) -> None:
    total = send_batched(conn, count, _BATCH)
    _check_count(total - state[0], count)
    state[0] = total


def _check_count(handled: int, count: int) -> None:
    if handled != count:
        raise RuntimeError(f"the process handled {handled} of {count} messages")


def measure_roundtrip(profile: Profile) -> Comparison:
    """Microseconds per sequential ask to a process actor vs a pickled echo over a Pipe."""
    count = profile.count(10_000, minimum=50)
    with ActorSystem("bench-roundtrip") as system:
        ours = system.spawn(Counter, name="counter", process=True)
        with raw_process(echo_child, system.start_method) as conn:
            medians = interleave({
                "ours": lambda: seconds_per(count, partial(_roundtrip_ours, ours, count)),
                "raw": lambda: seconds_per(count, partial(_roundtrip_raw, conn, count)),
            }, repeats=profile.repeats)
    return Comparison(value=medians["ours"] * 1e6, baseline_value=medians["raw"] * 1e6)


def measure_batched(profile: Profile) -> Comparison:
    """Messages per second: tells to a process actor vs lists of 100 pickled over a Pipe."""
    count = profile.count(200_000, minimum=500)
    with ActorSystem("bench-batched") as system:
        ours = system.spawn(Counter, name="counter", process=True)
        with raw_process(counting_child, system.start_method) as conn:
            state = [0]
            medians = interleave({
                "ours": lambda: per_second(count, partial(_tells_ours, ours, count)),
                "raw": lambda: per_second(count, partial(_tells_raw, conn, count, state)),
            }, repeats=profile.repeats)
    return Comparison(value=medians["ours"], baseline_value=medians["raw"])


SCENARIOS = (
    Scenario(name="process_roundtrip", unit="us", baseline="raw Pipe echo + pickle",
             target=None, measure=measure_roundtrip, higher_is_better=False),
    Scenario(name="process_batched", unit="msg/s", baseline="raw Pipe, lists of 100",
             target=None, measure=measure_batched),
)
