"""`pin_threads`: this process's threads on one CPU, process actors started after it on
the CPUs the process had (real threads, real processes started with ``spawn``, which
take the CPUs of the thread that starts them)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from actors import Actor, ActorSystem, pin_threads, unpin_threads
from actors.process._affinity import _set_every_thread, process_cpus

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and at least two CPUs",
)


@pytest.fixture(autouse=True)
def all_cpus() -> Iterator[frozenset[int]]:
    """The CPUs this process has; every thread gets them back after the test."""
    cpus = frozenset(os.sched_getaffinity(0))
    yield cpus
    unpin_threads()
    assert frozenset(os.sched_getaffinity(0)) == cpus


class CpusActor(Actor):
    def on_receive(self, message: object) -> object:
        return sorted(os.sched_getaffinity(0))


def _cpus_in_a_child(system: ActorSystem, name: str) -> list[int]:
    """The CPUs of a process actor started now (sorted)."""
    child = system.spawn(CpusActor, name=name, process=True)
    cpus: list[int] = child.ask("cpus", timeout=60).result(60)
    return cpus


def _cpus_of(thread: threading.Thread) -> set[int]:
    assert thread.native_id is not None
    return os.sched_getaffinity(thread.native_id)


def test_every_thread_is_pinned_and_gets_its_cpus_back(all_cpus: frozenset[int]) -> None:
    release = threading.Event()
    waiting = threading.Thread(target=release.wait, name="test-affinity-waiting")
    waiting.start()
    try:
        cpu = min(all_cpus)
        assert pin_threads(cpu) == cpu
        assert os.sched_getaffinity(0) == {cpu}
        assert _cpus_of(waiting) == {cpu}
        assert _cpus_of(threading.main_thread()) == {cpu}
        seen: list[set[int]] = []
        later = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        later.start()
        later.join(10)
        assert seen == [{cpu}]  # a thread started later takes its creator's CPU
        assert process_cpus() == all_cpus

        unpin_threads()
        assert _cpus_of(waiting) == set(all_cpus)
        assert os.sched_getaffinity(0) == set(all_cpus)
        assert process_cpus() is None
    finally:
        release.set()
        waiting.join(10)


def test_the_default_cpu_is_the_highest_and_a_second_pin_moves_threads(
    all_cpus: frozenset[int],
) -> None:
    assert pin_threads() == max(all_cpus)
    assert os.sched_getaffinity(0) == {max(all_cpus)}
    assert pin_threads(min(all_cpus)) == min(all_cpus)
    assert os.sched_getaffinity(0) == {min(all_cpus)}
    assert process_cpus() == all_cpus  # still the CPUs from before the first pin


def test_a_cpu_the_process_may_not_use_is_refused(all_cpus: frozenset[int]) -> None:
    with pytest.raises(ValueError, match="is not one this process may use"):
        pin_threads(max(all_cpus) + 1000)
    for garbage in (True, "0", 0.0):
        with pytest.raises(TypeError, match="cpu must be an int"):
            pin_threads(garbage)  # type: ignore[arg-type]
    assert os.sched_getaffinity(0) == set(all_cpus)
    assert process_cpus() is None


def test_a_process_actor_started_while_pinned_runs_on_every_cpu(
    all_cpus: frozenset[int],
) -> None:
    with ActorSystem("affinity", start_method="spawn") as system:
        # multiprocessing's helpers start with the first child: not on the pinned CPU
        assert _cpus_in_a_child(system, "started-first") == sorted(all_cpus)
        pin_threads(min(all_cpus))
        assert _cpus_in_a_child(system, "started-pinned") == sorted(all_cpus)
        unpin_threads()
        assert _cpus_in_a_child(system, "started-unpinned") == sorted(all_cpus)


def test_without_the_fix_a_spawned_child_would_inherit_the_pin(
    all_cpus: frozenset[int],
) -> None:
    """The check above fails without `pin_threads`' record: threads pinned by hand
    start their children on their CPU (what a pool of workers would then share)."""
    cpu = min(all_cpus)
    with ActorSystem("affinity-by-hand", start_method="spawn") as system:
        assert _cpus_in_a_child(system, "started-first") == sorted(all_cpus)
        _set_every_thread({cpu})
        try:
            assert _cpus_in_a_child(system, "inherits") == [cpu]
        finally:
            _set_every_thread(all_cpus)
