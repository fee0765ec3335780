"""Room the members have free: an unkeyed chunk may fill all of it, a keyed one only what
any single member has (a busy worker: its next hand-over), and a stuck group still lets
through capacity plus prefetch."""

from __future__ import annotations

import threading
from typing import Any

from support.groups import FakeEndpoint, group_of, publish_chunk

from runtime import Bus, Delivery
from runtime.core._envelope import Envelope
from runtime.core.subscribers._group_mail import Credit
from runtime.errors import WouldBlock


class _Worker(FakeEndpoint):
    """A worker-like endpoint: at most two hand-overs of ``size`` in flight."""

    handovers: int | None = 2

    def __init__(self, key: int, window: int = 256, size: int = 64) -> None:
        super().__init__(key, window, size, whole=True)


class _Thread(_Worker):
    """A thread-member-like endpoint: only its window bounds it."""

    handovers = None


def _chunk(count: int) -> list[Envelope]:
    return [(n, str(n), n, None, None, "t", None) for n in range(count)]


def test_idle_members_lend_what_their_next_hand_overs_can_take() -> None:
    group = group_of(_Worker(1), _Worker(2), _Thread(3, window=32))
    publish_chunk(group, [])  # nothing to hand over: the lending alone

    # each worker two hand-overs of 64; the thread member its window of 32
    assert (group._gate.lent, group._gate.lent_keyed) == (2 * 128 + 32, 32)


def test_a_dispatch_lends_what_is_left_and_a_credit_lends_more() -> None:
    first, second = _Worker(1), _Worker(2)
    group = group_of(first, second)

    publish_chunk(group, _chunk(150))  # 64 + 64 + 22: one worker now holds two hand-overs

    full = first if len(first.sizes) == 2 else second
    assert sorted(first.sizes + second.sizes) == [22, 64, 64] and len(full.sizes) == 2
    # the full one has nothing free, but its keys may wait for its next hand-over (64)
    assert (group._gate.lent, group._gate.lent_keyed) == (64, 64)
    group.on_receive(Credit(full.key, sum(full.sizes), 2))  # it answered both
    assert (group._gate.lent, group._gate.lent_keyed) == (64 + 128, 64)


def test_a_busy_worker_s_keys_wait_for_its_next_hand_over_not_for_more() -> None:
    worker, thread = _Worker(1, window=256, size=64), _Thread(2, window=32)
    group = group_of(worker, thread)
    publish_chunk(group, _chunk(64 + 64 + 32))  # the worker holds two, the thread 32

    assert group._gate.lent == 0  # nobody has room
    assert group._gate.lent_keyed == 0  # the thread member's keys: nothing may wait
    small, large = _Worker(3, window=40, size=64), _Worker(4, size=64)
    workers = group_of(small, large)
    publish_chunk(workers, _chunk(40 + 128))
    assert (sum(small.sizes), sum(large.sizes)) == (40, 128)  # both full
    # a worker's keys may wait for its next hand-over, within its prefetch: min(64, 40)
    assert (workers._gate.lent, workers._gate.lent_keyed) == (0, 40)


def _stuck_handler(release: threading.Event, entered: threading.Event) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        entered.set()
        release.wait(timeout=30)
        delivery.ack()

    return handler


def test_keyed_messages_for_a_stuck_member_borrow_nothing_from_an_idle_one() -> None:
    release, entered = threading.Event(), threading.Event()
    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=1, ack_timeout=None)
        for _ in range(2):  # the key's member gets stuck; the other stays idle, room free
            topic.subscribe(_stuck_handler(release, entered), group="g", prefetch=2)

        accepted, error = 0, None
        for n in range(60):
            try:
                topic.publish(n, key="one-key", timeout=2.0)
            except WouldBlock as exc:
                accepted, error = n, exc
                break
        assert entered.wait(timeout=5)
        release.set()
        assert topic.join(timeout=10)
        assert topic.stats().delivered == accepted

    # its prefetch (2) and the capacity (1), as with no other member; lending the idle
    # member's room (2) would have let 5-6 through
    assert accepted in (3, 4)
    assert error is not None and "'g'" in str(error)

