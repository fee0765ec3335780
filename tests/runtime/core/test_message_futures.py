"""MessageFuture behaves as a concurrent.futures.Future in every way a caller uses one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    InvalidStateError,
    as_completed,
    wait,
)
from pathlib import Path

import pytest

from runtime.core._future import MessageFuture, resolve_all


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


def test_cancel_is_refused_and_double_resolution_raises_like_future() -> None:
    future: MessageFuture[str] = MessageFuture()

    assert not future.cancel()  # a publish is on its way once accepted (as in Pub/Sub)
    assert not future.cancelled()
    future.set_result("once")

    with pytest.raises(InvalidStateError):
        future.set_result("twice")
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError("late"))
    assert future.result(timeout=0) == "once"
    assert not future.cancel()


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


def test_resolve_all_resolves_in_order_and_skips_futures_already_done() -> None:
    futures: list[Future[str]] = [MessageFuture() for _ in range(4)]
    futures[1].set_exception(ValueError("failed first"))
    seen: list[str] = []
    futures[2].add_done_callback(lambda done: seen.append(done.result()))
    plain: Future[str] = Future()
    assert plain.cancel()

    resolve_all([*futures, plain], ["a", "b", "c", "d", "e"])

    assert [f.result(timeout=0) for f in (futures[0], futures[2], futures[3])] == ["a", "c", "d"]
    assert isinstance(futures[1].exception(timeout=0), ValueError)
    assert plain.cancelled()
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


def test_callbacks_added_while_another_thread_resolves_run_once_with_the_result() -> None:
    futures: list[Future[int]] = [MessageFuture() for _ in range(5000)]
    calls: list[tuple[int, int]] = []
    halfway = threading.Event()

    def listen() -> None:
        for n, future in enumerate(futures):
            if n == 100:
                halfway.set()
            future.add_done_callback(lambda done, n=n: calls.append((n, done.result())))

    listener = threading.Thread(target=listen)
    listener.start()
    assert halfway.wait(10.0)
    for start in range(0, len(futures), 50):  # as the Publisher does, batch by batch
        resolve_all(futures[start:start + 50], [n * 2 for n in range(start, start + 50)])
    listener.join(10.0)

    assert sorted(calls) == [(n, n * 2) for n in range(5000)]  # each exactly once


def test_a_message_future_overrides_nothing_of_future_but_cancel() -> None:
    # Only Future's public API: no private attribute replaced, no resolution of its own
    # (a deep copy is the future itself: one message, one future).
    # What the class defines that can be called (3.13 adds data such as __firstlineno__).
    own = {name for name, value in vars(MessageFuture).items() if callable(value)}

    assert own == {"cancel", "__deepcopy__"}
    assert MessageFuture().cancel() is False


def test_reading_the_future_being_resolved_mid_collection_does_not_crash() -> None:
    root = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(root / "tests" / "support" / "future_stress.py"), "50"],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True, text=True, timeout=120, check=False,
    )

    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout) > 50  # the finalizer did read futures being resolved


def test_reading_a_resolved_future_gives_its_result_at_once() -> None:
    resolved: MessageFuture[str] = MessageFuture()
    resolve_all([resolved], ["id-7"])

    assert resolved.done() and resolved.result() == "id-7"
    assert resolved.result(timeout=0) == "id-7" and resolved.exception() is None


def test_reading_a_failed_or_pending_future_behaves_as_future_does() -> None:
    failed: MessageFuture[str] = MessageFuture()
    failed.set_exception(ValueError("refused"))
    pending: MessageFuture[str] = MessageFuture()

    assert failed.done() and isinstance(failed.exception(), ValueError)
    with pytest.raises(ValueError, match="refused"):
        failed.result()
    assert not pending.done()
    with pytest.raises(TimeoutError):
        pending.exception(timeout=0)
