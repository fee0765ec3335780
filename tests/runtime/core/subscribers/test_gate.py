"""A balanced group's queue bound: whole chunks while not full, single messages exactly."""

from __future__ import annotations

import threading
import time

import pytest

from runtime.core.subscribers._gate import Gate
from runtime.errors import WouldBlock


def _soon() -> float:
    return time.monotonic() + 0.05


def test_single_messages_stop_exactly_at_the_capacity() -> None:
    gate = Gate(2)
    assert gate.acquire(1, None) and gate.acquire(1, None)

    with pytest.raises(WouldBlock):
        gate.acquire(1, _soon())
    assert gate.used == 2


def test_a_chunk_goes_in_whole_while_the_queue_is_not_full() -> None:
    gate = Gate(4)
    assert gate.acquire(3, None)
    assert gate.acquire(3, None)  # 3 < 4: not full, so the chunk goes in whole

    assert gate.used == 6  # past the capacity by less than one chunk
    with pytest.raises(WouldBlock):
        gate.acquire(1, _soon())
    gate.release(3)  # handed on: 3 queued of 4
    assert gate.acquire(1, _soon()) and gate.used == 4
    with pytest.raises(WouldBlock):
        gate.acquire(1, _soon())  # full again
    gate.release(1)
    assert gate.acquire(4, None) and gate.used == 7


def _waiting_publisher(gate: Gate, count: int) -> tuple[threading.Thread, threading.Event]:
    """A started thread taking room for ``count`` (for up to 10 s); the event says it did."""
    taken = threading.Event()

    def publish() -> None:
        gate.acquire(count, time.monotonic() + 10)
        taken.set()

    publisher = threading.Thread(target=publish)
    publisher.start()
    return publisher, taken


def test_a_waiting_chunk_goes_in_once_the_group_hands_some_on() -> None:
    gate = Gate(4)
    gate.acquire(4, None)
    publisher, taken = _waiting_publisher(gate, 4)
    assert not taken.wait(0.05)
    gate.release(1)
    publisher.join(timeout=10)

    assert taken.is_set() and gate.used == 7


def test_closing_wakes_a_waiting_chunk_with_a_refusal() -> None:
    gate = Gate(1)
    gate.acquire(1, None)
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(gate.acquire(1, None)))
    waiter.start()
    gate.close()
    waiter.join(timeout=10)

    assert results == [False]
    assert gate.try_acquire(1) == -1


class _CountingCondition(threading.Condition):
    """A condition that counts its ``notify_all`` calls."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.wakes = 0

    def notify_all(self) -> None:
        self.wakes += 1
        super().notify_all()


def test_a_release_that_leaves_the_queue_full_wakes_nobody() -> None:
    gate = Gate(4)
    gate._changed = condition = _CountingCondition()
    gate.acquire(3, None)
    gate.acquire(3, None)  # 6 queued of 4
    publisher, taken = _waiting_publisher(gate, 2)
    try:
        while gate._waiting == 0:  # the publisher is waiting for room
            with condition:
                pass
        gate.release(1)  # 5 of 4: still full, the waiter could not go in
        gate.release(1)  # 4 of 4: still full
        assert condition.wakes == 0 and not taken.is_set()
        gate.release(1)  # 3 of 4: room
    finally:
        publisher.join(timeout=10)

    assert condition.wakes == 1 and taken.is_set() and gate.used == 5
