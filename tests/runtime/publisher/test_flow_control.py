"""The flow-control gate: limits, behaviours, FIFO waiters, release exactly once."""

from __future__ import annotations

import pickle
import threading

import pytest
from support.publisher import Threads, wait_for_waiters

from runtime.errors import FlowControlError, PublishError
from runtime.publisher._flow_control import FlowControl, FlowGate

MESSAGES_TEXT = "Flow control: max outstanding messages exceeded"
BYTES_TEXT = "Flow control: max outstanding bytes exceeded"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_outstanding_messages", 0), ("max_outstanding_bytes", -5),
        ("max_outstanding_messages", 2.0), ("limit_exceeded", "drop"),
        ("block_timeout", -1), ("block_timeout", "1"),
    ],
)
def test_invalid_flow_control_raises_code_3(field: str, value: object) -> None:
    with pytest.raises(PublishError) as caught:
        FlowControl(**{field: value})  # type: ignore[arg-type]

    assert caught.value.code == 3
    assert field in str(caught.value)


def test_defaults_are_unlimited_and_never_block() -> None:
    gate = FlowGate(FlowControl())

    for _ in range(1000):
        gate.acquire(1 << 20)

    assert gate.outstanding == (1000, 1000 << 20)


def test_error_behaviour_fails_at_once_with_code_8() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=2, limit_exceeded="error"))
    gate.acquire(1)
    gate.acquire(1)

    with pytest.raises(FlowControlError) as caught:
        gate.acquire(1)

    assert caught.value.code == 8
    assert str(caught.value) == MESSAGES_TEXT
    restored = pickle.loads(pickle.dumps(caught.value))
    assert (type(restored), restored.code, str(restored)) == (FlowControlError, 8, MESSAGES_TEXT)
    assert gate.outstanding == (2, 2)


def test_error_behaviour_names_bytes_when_bytes_are_exceeded() -> None:
    gate = FlowGate(FlowControl(max_outstanding_bytes=100, limit_exceeded="error"))
    gate.acquire(60)

    with pytest.raises(FlowControlError, match=r"^Flow control: max outstanding bytes exceeded$"):
        gate.acquire(41)

    gate.acquire(40)
    assert gate.outstanding == (2, 100)


def test_message_that_could_never_fit_fails_at_once() -> None:
    gate = FlowGate(FlowControl(max_outstanding_bytes=100))

    with pytest.raises(FlowControlError) as caught:
        gate.acquire(101)

    assert str(caught.value) == BYTES_TEXT
    assert gate.outstanding == (0, 0)
    assert gate.waiting == 0


def test_ignore_never_blocks() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=1, max_outstanding_bytes=1,
                                limit_exceeded="ignore"))

    for _ in range(5):
        gate.acquire(10)

    assert gate.outstanding == (5, 50)


def test_blocked_acquire_runs_on_block_and_waits_for_release(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=1))
    gate.acquire(1)
    blocked = threading.Event()

    result = threads.acquire(gate, 1, on_block=blocked.set)
    assert blocked.wait(5.0)
    assert not result.done()
    gate.release(1, 1)

    assert result.result(timeout=5.0) is None
    assert gate.outstanding == (1, 1)


def test_waiters_are_admitted_first_come_first_served(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_bytes=100))
    gate.acquire(50)
    gate.acquire(50)
    big = threads.acquire(gate, 80)
    wait_for_waiters(gate, 1)
    small = threads.acquire(gate, 10)
    wait_for_waiters(gate, 2)

    gate.release(1, 50)  # room for the small one only, but the big one is first
    assert not big.done() and not small.done()
    gate.release(1, 50)

    big.result(timeout=5.0)
    small.result(timeout=5.0)
    assert gate.outstanding == (2, 90)


def test_newcomer_never_overtakes_a_waiter(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_bytes=100))
    gate.acquire(90)
    waiter = threads.acquire(gate, 50)
    wait_for_waiters(gate, 1)

    late = threads.acquire(gate, 5)  # would fit, but must queue behind the waiter
    wait_for_waiters(gate, 2)

    assert not late.done()
    gate.release(1, 90)
    waiter.result(timeout=5.0)
    late.result(timeout=5.0)
    assert gate.outstanding == (2, 55)


def test_block_timeout_expiry_raises_flow_control_error() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=1, block_timeout=0.02))
    gate.acquire(1)

    with pytest.raises(FlowControlError, match="messages exceeded"):
        gate.acquire(1)

    assert gate.waiting == 0
    assert gate.outstanding == (1, 1)


def test_expired_head_lets_the_next_waiter_in(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_bytes=100))
    gate.acquire(60)
    gate.update(FlowControl(max_outstanding_bytes=100, block_timeout=0.05))
    head = threads.acquire(gate, 50)
    wait_for_waiters(gate, 1)
    gate.update(FlowControl(max_outstanding_bytes=100))
    second = threads.acquire(gate, 30)

    with pytest.raises(FlowControlError):
        head.result(timeout=5.0)

    second.result(timeout=5.0)
    assert gate.outstanding == (2, 90)


def test_growing_limits_wake_waiters(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=1))
    gate.acquire(1)
    waiter = threads.acquire(gate, 1)
    wait_for_waiters(gate, 1)

    gate.update(FlowControl(max_outstanding_messages=2))

    waiter.result(timeout=5.0)
    assert gate.outstanding == (2, 2)


def test_shrinking_bytes_below_a_waiter_fails_it(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_bytes=100))
    gate.acquire(100)
    waiter = threads.acquire(gate, 60)
    wait_for_waiters(gate, 1)

    gate.update(FlowControl(max_outstanding_bytes=50))

    with pytest.raises(FlowControlError, match="bytes exceeded"):
        waiter.result(timeout=5.0)


def test_close_wakes_waiters_and_refuses_later_acquires(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=1))
    gate.acquire(1)
    waiter = threads.acquire(gate, 1)
    wait_for_waiters(gate, 1)
    closed = PublishError("Publisher is closed", 9)

    gate.close(lambda: closed)

    with pytest.raises(PublishError, match="Publisher is closed"):
        waiter.result(timeout=5.0)
    with pytest.raises(PublishError, match="Publisher is closed"):
        gate.acquire(1)
    assert gate.outstanding == (1, 1)


def test_releasing_more_than_outstanding_is_refused() -> None:
    gate = FlowGate(FlowControl())
    gate.acquire(10)

    with pytest.raises(RuntimeError):
        gate.release(2, 10)

    gate.release(1, 10)
    assert gate.outstanding == (0, 0)


@pytest.mark.parametrize(("settings", "stop", "outstanding"), [
    (FlowControl(), 5, (5, 15)),  # no limit: all at once
    (FlowControl(max_outstanding_messages=3), 3, (3, 6)),
    (FlowControl(max_outstanding_bytes=10), 4, (4, 10)),  # the 5th would exceed 10 bytes
    (FlowControl(max_outstanding_messages=3, limit_exceeded="ignore"), 5, (5, 15)),
])
def test_admit_now_admits_a_run_in_order_up_to_the_first_that_does_not_fit(
    settings: FlowControl, stop: int, outstanding: tuple[int, int],
) -> None:
    gate = FlowGate(settings)

    with gate.lock:
        admitted = gate.admit_now([1, 2, 3, 4, 5], 0, 5)

    assert admitted == stop and gate.outstanding == outstanding
