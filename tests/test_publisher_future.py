"""MessageFuture behaves as a concurrent.futures.Future in every way a caller uses one."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    InvalidStateError,
    as_completed,
    wait,
)

import pytest

from runtime._publisher_future import MessageFuture, _resolve_unlocked, resolve_all


def resolve_later(future: Future[str], value: str, started: threading.Event) -> threading.Thread:
    def run() -> None:
        started.wait(5.0)
        future.set_result(value)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_is_a_concurrent_future_resolved_without_waiters() -> None:
    future: MessageFuture[str] = MessageFuture()

    future.set_result("id-1")

    assert isinstance(future, Future)
    assert future.done() and not future.cancelled()
    assert future.result(timeout=0) == "id-1"
    assert future.exception(timeout=0) is None


def test_result_waits_for_a_resolution_from_another_thread() -> None:
    future: MessageFuture[str] = MessageFuture()
    started = threading.Event()
    thread = resolve_later(future, "late", started)

    started.set()
    value = future.result(timeout=5.0)
    thread.join(timeout=5.0)

    assert value == "late"


def test_result_times_out_while_pending() -> None:
    future: MessageFuture[str] = MessageFuture()

    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)


def test_callbacks_run_once_whether_added_before_or_after() -> None:
    future: MessageFuture[str] = MessageFuture()
    seen: list[str] = []
    future.add_done_callback(lambda f: seen.append("before:" + f.result()))

    future.set_result("x")
    future.add_done_callback(lambda f: seen.append("after:" + f.result()))

    assert seen == ["before:x", "after:x"]


def test_wait_and_as_completed_see_the_resolution() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(3)]
    started = threading.Event()
    threads = [resolve_later(f, f"id{i}", started) for i, f in enumerate(futures)]

    started.set()
    done, _ = wait(futures, timeout=5.0, return_when=FIRST_COMPLETED)
    completed = sorted(f.result() for f in as_completed(futures, timeout=5.0))
    for thread in threads:
        thread.join(timeout=5.0)

    assert done
    assert completed == ["id0", "id1", "id2"]


def test_cancel_and_double_resolution_behave_like_future() -> None:
    cancelled: MessageFuture[str] = MessageFuture()
    resolved: MessageFuture[str] = MessageFuture()

    assert cancelled.cancel()
    resolved.set_result("once")

    with pytest.raises(InvalidStateError):
        cancelled.set_result("late")
    with pytest.raises(InvalidStateError):
        resolved.set_result("twice")
    with pytest.raises(CancelledError):
        cancelled.result(timeout=0)
    assert resolved.result(timeout=0) == "once"


def test_exception_is_delivered() -> None:
    future: MessageFuture[str] = MessageFuture()

    future.set_exception(ValueError("boom"))

    with pytest.raises(ValueError, match="boom"):
        future.result(timeout=0)
    assert "finished raised ValueError" in repr(future)


def test_works_with_asyncio_wrap_future() -> None:
    future: MessageFuture[str] = MessageFuture()

    async def main() -> str:
        wrapped = asyncio.wrap_future(future)
        asyncio.get_running_loop().call_soon(future.set_result, "async")
        return await asyncio.wait_for(wrapped, timeout=5.0)

    assert asyncio.run(main()) == "async"


def test_many_racing_waiters_are_all_woken() -> None:
    for _ in range(200):
        future: MessageFuture[int] = MessageFuture()
        results: list[int] = []
        waiter = threading.Thread(target=lambda f=future, r=results: r.append(f.result(timeout=5.0)))
        waiter.start()

        future.set_result(7)
        waiter.join(timeout=5.0)

        assert results == [7]


def test_resolve_all_resolves_in_order_and_skips_cancelled_futures() -> None:
    futures: list[Future[str]] = [MessageFuture() for _ in range(4)]
    assert futures[1].cancel()
    seen: list[str] = []
    futures[2].add_done_callback(lambda done: seen.append(done.result()))
    plain: Future[str] = Future()

    resolve_all([*futures, plain], ["a", "b", "c", "d", "e"])

    assert [f.result(timeout=0) for f in (futures[0], futures[2], futures[3], plain)] == [
        "a", "c", "d", "e"]
    assert futures[1].cancelled()
    assert seen == ["c"]


def test_resolve_all_wakes_a_caller_blocked_in_result() -> None:
    future: MessageFuture[str] = MessageFuture()
    results: list[str] = []
    waiting = threading.Thread(target=lambda: results.append(future.result(timeout=10)))
    waiting.start()
    done, _ = wait([future], timeout=0)  # builds the condition, as a blocked caller does
    assert not done

    resolve_all([future], ["id-7"])
    waiting.join(10)

    assert results == ["id-7"]
    assert not waiting.is_alive()


def test_a_cancel_that_wins_the_race_with_a_lock_free_resolve_settles_it_once() -> None:
    future: MessageFuture[str] = MessageFuture()
    calls: list[bool] = []
    future.add_done_callback(lambda done: calls.append(done.cancelled()))
    assert future.cancel()  # as if it ran between the resolver's check and its write

    _resolve_unlocked(future, future.__dict__, "id-1")  # the resolver's write comes late
    future._wake()  # and so does its wake-up

    assert future.cancelled()
    assert calls == [True]
