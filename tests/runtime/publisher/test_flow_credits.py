"""Credits: the room of a message limit, taken by publishers without the gate's lock."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic, Threads, batching, wait_for_waiters

from actors import ActorSystem
from runtime.core._message import Message
from runtime.errors import FlowControlError, PublishError
from runtime.publisher._flow_control import CREDITS, FlowControl, FlowGate
from runtime.publisher._intake import uncounted
from runtime.publisher._publisher import Publisher


def take_credits(gate: FlowGate, count: int) -> None:
    """What `Publisher.publish` does for ``count`` messages: pop credits, lock-free."""
    for _ in range(count):
        assert gate.credits.pop() is True


def test_room_under_a_message_limit_becomes_credits() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=5, limit_exceeded="error"))

    gate.acquire(10)

    assert len(gate.credits) == 4
    assert gate.outstanding == (1, 10)  # credits nobody took are not outstanding
    take_credits(gate, 4)
    with gate.lock:
        gate.count_in(0, 40)  # the Publisher actor counts their bytes when it takes them
    assert gate.outstanding == (5, 50)
    with pytest.raises(FlowControlError, match="messages exceeded"):
        gate.acquire(1)


def test_credits_never_exceed_the_cap() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=10 * CREDITS))

    gate.acquire(1)

    assert len(gate.credits) == CREDITS
    assert gate.outstanding == (1, 1)


def test_a_byte_limit_makes_no_credits() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=5, max_outstanding_bytes=100))

    gate.acquire(10)
    gate.release(1, 10)

    assert gate.credits == []
    assert gate.outstanding == (0, 0)


def test_admission_under_the_lock_takes_a_credit_first() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=3))
    gate.acquire(1)

    gate.acquire(7)  # from the credits: counts only its bytes

    assert (len(gate.credits), gate.outstanding) == (1, (2, 8))


def test_no_credits_while_someone_waits(threads: Threads) -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=3))
    gate.acquire(1)
    take_credits(gate, 2)
    first = threads.acquire(gate, 1)
    wait_for_waiters(gate, 1)
    second = threads.acquire(gate, 1)
    wait_for_waiters(gate, 2)

    gate.release(1, 1)
    first.result(timeout=5.0)
    assert (gate.credits, second.done()) == ([], False)  # the room went to the first waiter
    gate.release(2, 0)  # the two credited messages, whose bytes were never counted

    second.result(timeout=5.0)
    assert (len(gate.credits), gate.outstanding) == (1, (2, 2))


def test_close_takes_the_credits_back() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=10))
    gate.acquire(4)
    closed = PublishError("Publisher is closed", 9)

    gate.close(lambda: closed)

    assert (gate.credits, gate.outstanding) == ([], (1, 4))
    gate.release(1, 4)
    assert gate.outstanding == (0, 0)


def test_a_new_limit_takes_the_credits_back_and_makes_its_own() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=10))
    gate.acquire(1)
    assert len(gate.credits) == 9

    gate.update(FlowControl(max_outstanding_messages=3))
    assert (len(gate.credits), gate.outstanding) == (2, (1, 1))
    gate.update(FlowControl(max_outstanding_messages=3, max_outstanding_bytes=100))
    assert (gate.credits, gate.outstanding) == ([], (1, 1))


def test_releasing_a_credit_nobody_took_is_refused() -> None:
    gate = FlowGate(FlowControl(max_outstanding_messages=10))
    gate.acquire(1)

    with pytest.raises(RuntimeError, match="released more than outstanding"):
        gate.release(2, 0)

    assert gate.outstanding == (1, 1)


@pytest.mark.parametrize(
    ("counted", "expected"),
    [
        ([False, False], (2, 30)), ([True, True], (0, 0)), ([None, None], (0, 30)),
        ([True, None, False], (1, 60)), ([None, True], (0, 10)), ([False, None], (1, 30)),
        ([], (0, 0)), ([True, None, None], (0, 60)), ([None, False, True], (1, 30)),
    ],
)
def test_uncounted_counts_a_credited_row_by_its_bytes_only(
    counted: list[bool | None], expected: tuple[int, int]
) -> None:
    sizes = [10, 20, 40][:len(counted)]

    assert uncounted(sizes, counted) == expected


def test_uncounted_agrees_row_by_row_with_any_mix_of_flags() -> None:
    rng = random.Random(7)
    for _ in range(500):
        size = rng.randint(1, 30)
        kinds = rng.sample([False, None, True], rng.randint(1, 3))
        counted = [rng.choice(kinds) for _ in range(size)]
        sizes = [rng.randint(0, 300) for _ in range(size)]

        assert uncounted(sizes, counted) == (
            sum(flag is False for flag in counted),
            sum(nbytes for nbytes, flag in zip(sizes, counted, strict=True) if flag is not True))


class CountingTopic(FakeTopic):
    """Confirms at once, noting how many messages the Publisher had outstanding each time."""

    def __init__(self) -> None:
        super().__init__()
        self.publisher: Publisher | None = None
        self.seen: list[int] = []

    def _publish_batch(self, messages: list[Message]) -> Future[list[str]]:
        assert self.publisher is not None
        self.seen.append(self.publisher.outstanding[0])
        return super()._publish_batch(messages)


def test_threads_taking_credits_never_exceed_the_limit(system: ActorSystem) -> None:
    topic = CountingTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=7),
                    flow_control=FlowControl(max_outstanding_messages=50))
    topic.publisher = pub

    ids = published_ids(pub, threads=4, each=2_000)

    assert len(set(ids)) == len(ids) == 8_000
    assert sum(len(batch) for batch in topic.batches) == 8_000
    assert max(topic.seen) <= 50 and len(topic.seen) >= 8_000 // 50
    assert (pub.outstanding, pub._gate.credits) == ((0, 0), [])


def published_ids(pub: Publisher, *, threads: int, each: int,
                  before_close: Callable[[], None] = lambda: None) -> list[str]:
    """Publish ``each`` distinct messages from each of ``threads`` threads at once; run
    ``before_close``, close the Publisher, and return every future's id."""
    results: list[list[Future[str]]] = [[] for _ in range(threads)]

    def publish_all(index: int) -> None:
        results[index] = [pub.publish(b"%d-%d" % (index, n)) for n in range(each)]

    workers = [threading.Thread(target=publish_all, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60.0)
    before_close()
    pub.close(timeout=10.0)
    return [future.result(timeout=0) for futures in results for future in futures]


def test_a_publish_racing_close_still_settles(system: ActorSystem) -> None:
    topic = FakeTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=10),
                    flow_control=FlowControl(max_outstanding_messages=100))
    futures: list[Future[str]] = []
    refused = threading.Event()
    started = threading.Event()

    def publish_until_refused() -> None:
        started.set()
        try:
            while True:
                futures.append(pub.publish(b"x"))
        except PublishError:
            refused.set()

    worker = threading.Thread(target=publish_until_refused)
    worker.start()
    assert started.wait(5.0)
    pub.close(timeout=10.0)
    worker.join(timeout=10.0)

    assert refused.is_set() and futures
    outcomes = [future.exception(timeout=5.0) for future in futures]
    confirmed = [f for f, error in zip(futures, outcomes, strict=True) if error is None]
    assert all(isinstance(error, PublishError) for error in outcomes if error is not None)
    assert sum(len(batch) for batch in topic.batches) == len(confirmed)
    assert pub.outstanding == (0, 0)


def test_limits_changing_under_racing_publishers_lose_nothing(system: ActorSystem) -> None:
    topic = FakeTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=5),
                    flow_control=FlowControl(max_outstanding_messages=20))
    done = threading.Event()

    def change_limits() -> None:  # limited, unlimited, bytes-limited (no credits), again
        settings = [FlowControl(max_outstanding_messages=7), FlowControl(),
                    FlowControl(max_outstanding_messages=20, max_outstanding_bytes=10_000)]
        turn = 0
        while not done.is_set():
            pub.set_options(flow_control=settings[turn % len(settings)])
            turn += 1

    changer = threading.Thread(target=change_limits)
    changer.start()
    try:
        ids = published_ids(pub, threads=3, each=3_000, before_close=done.set)
    finally:
        done.set()
        changer.join(timeout=10.0)

    assert len(set(ids)) == len(ids) == 9_000
    assert sum(len(batch) for batch in topic.batches) == 9_000
    assert (pub.outstanding, pub._gate.credits) == ((0, 0), [])
