"""A balanced group's queue bound: whole chunks while not full, single messages exactly."""

from __future__ import annotations

import threading
import time

import pytest

from runtime import Bus
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


def _waiting_publisher(
    gate: Gate, count: int, *, keyed: bool = True,
) -> tuple[threading.Thread, threading.Event]:
    """A started thread taking room for ``count`` (for up to 10 s); the event says it did."""
    taken = threading.Event()

    def publish() -> None:
        gate.acquire(count, time.monotonic() + 10, keyed)
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
    """A condition (on the gate's own lock) that counts its ``notify_all`` calls."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.wakes = 0

    def notify_all(self) -> None:
        self.wakes += 1
        super().notify_all()


def test_a_release_that_leaves_the_queue_full_wakes_nobody() -> None:
    gate = Gate(4)
    gate._changed = condition = _CountingCondition(gate._lock)
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


def test_unkeyed_chunks_may_also_fill_the_room_every_member_has_free() -> None:
    gate = Gate(4)
    gate.lend(6, 2)  # the members can take 6 at once, the emptiest single one 2

    assert gate.acquire(5, None, keyed=False) and gate.acquire(4, None, keyed=False)
    assert gate.used == 9  # 9 < 4 + 6: an unkeyed one still goes in
    assert gate.full()  # `full` names the stricter bound: 9 >= 4 + 2
    with pytest.raises(WouldBlock):
        gate.acquire(1, _soon(), keyed=True)
    assert gate.acquire(1, None, keyed=False) and gate.used == 10
    with pytest.raises(WouldBlock):
        gate.acquire(1, _soon(), keyed=False)
    assert gate.try_acquire(3, keyed=False) == 0


def test_keyed_chunks_may_fill_only_what_any_one_member_has_free() -> None:
    gate = Gate(4)
    gate.lend(6, 2)

    assert gate.acquire(5, None, keyed=True)  # 0 < 4 + 2
    assert gate.try_acquire(3, keyed=True) == 1  # up to 4 + 2
    assert gate.used == 6 and gate.full()
    gate.lend(0, 0)  # the members are stuck: the capacity alone again
    gate.release(3)
    assert gate.try_acquire(3, keyed=False) == 1 and gate.used == 4


def test_room_the_members_free_wakes_a_waiting_chunk() -> None:
    gate = Gate(2)
    gate.acquire(2, None)
    publisher, taken = _waiting_publisher(gate, 3, keyed=False)
    try:
        while gate._waiting == 0:  # the publisher is waiting for room
            with gate._changed:
                pass
        gate.lend(0, 0)  # nothing more free: it keeps waiting
        assert not taken.is_set()
        gate.lend(1, 1)  # a member can take one: 2 < 2 + 1
    finally:
        publisher.join(timeout=10)

    assert taken.is_set() and gate.used == 5


def test_handing_on_uses_up_the_lent_room_with_the_queue_room() -> None:
    gate = Gate(1)
    gate.lend(32, 32)
    assert gate.try_acquire(100, keyed=False) == 33

    gate.hand_on(32)  # the group handed 32 to the member its room was lent by

    assert gate.try_acquire(100, keyed=False) == 0  # the member's room is taken, not free
    assert (gate.used, gate.lent) == (1, 0)


@pytest.mark.parametrize(("capacity", "prefetch"), [(1, None), (3, 4)])
def test_a_stuck_thread_member_lets_exactly_capacity_plus_prefetch_through(
    capacity: int, prefetch: int | None,
) -> None:
    bound = capacity + (32 if prefetch is None else prefetch)
    counts = [_accepted_past_a_stuck_member(capacity, prefetch, bound + 1) for _ in range(5)]

    assert counts == [bound] * 5  # the bound holds in every run


def _accepted_past_a_stuck_member(capacity: int, prefetch: int | None, most: int) -> int:
    """How many publishes a group whose one member is stuck takes before `WouldBlock`."""
    release = threading.Event()
    accepted = 0
    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=capacity)
        topic.subscribe(lambda d: release.wait(30), group="g", auto_ack=True, prefetch=prefetch)
        try:
            while accepted < most:
                topic.publish(accepted, timeout=0.3)
                accepted += 1
        except WouldBlock:
            return accepted
        finally:
            release.set()
    raise AssertionError(f"{accepted} publishes went through without WouldBlock")
