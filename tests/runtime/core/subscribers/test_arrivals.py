"""Arrivals: fan-out chunks wait for their group, which is told once per burst."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime import Bus
from runtime.core.subscribers._gate import ARRIVED, Arrivals


class _Recorder:
    def __init__(self) -> None:
        self.told: list[Any] = []

    def tell(self, message: Any) -> None:
        self.told.append(message)


def _chunk(*numbers: int) -> list[Any]:
    return [(n, str(n), n, None, None, "t", None) for n in numbers]


def test_a_burst_of_chunks_tells_the_group_once_and_is_taken_in_order() -> None:
    group = _Recorder()
    arrivals = Arrivals()
    arrivals.bind(group)  # type: ignore[arg-type]

    for start in (1, 3, 5):
        arrivals.put(_chunk(start, start + 1))

    assert group.told == [ARRIVED]
    assert [[e[0] for e in chunk] for chunk, _ in arrivals.take()] == [[1, 2], [3, 4], [5, 6]]
    assert arrivals.take() == []


def test_a_chunk_after_a_take_tells_the_group_again() -> None:
    group = _Recorder()
    arrivals = Arrivals()
    arrivals.bind(group)  # type: ignore[arg-type]

    arrivals.put(_chunk(1))
    first = arrivals.take()
    arrivals.put(_chunk(2))

    assert group.told == [ARRIVED, ARRIVED]
    assert [[e[0] for e in c] for c, _ in first] == [[1]]
    assert [[e[0] for e in c] for c, _ in arrivals.take()] == [[2]]


def test_a_chunk_put_while_the_group_takes_is_never_left_behind() -> None:
    # The group clears the due flag before it empties the queue: a chunk appended in
    # between is either taken by that take or announced by a new tell.
    group = _Recorder()
    arrivals = Arrivals()
    arrivals.bind(group)  # type: ignore[arg-type]
    arrivals.put(_chunk(1))

    arrivals._due = False  # the group's take has begun: flag cleared, queue not yet read
    arrivals.put(_chunk(2))
    taken = arrivals.take()

    assert group.told == [ARRIVED, ARRIVED]  # the second tell finds the queue empty: harmless
    assert [[e[0] for e in c] for c, _ in taken] == [[1], [2]]


def test_an_unbound_arrivals_refuses_loudly() -> None:
    with pytest.raises(RuntimeError, match="bind"):
        Arrivals().put(_chunk(1))


def test_one_at_a_time_publishes_into_a_busy_group_reach_its_member_in_order() -> None:
    # A stuck member: publishes pile up in the group's arrivals, then all reach the member.
    release = threading.Event()
    seen: list[int] = []

    def handler(delivery: Any) -> None:
        release.wait(timeout=10)
        seen.append(delivery.message)
        delivery.ack()

    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=1000)
        topic.subscribe(handler, group="g")
        reports = [topic.publish(n) for n in range(200)]
        release.set()
        outcomes = [report.outcome.result(timeout=10) for report in reports]
        assert topic.join(timeout=10)
        stats = topic.stats()

    assert seen == list(range(200))
    assert all(outcome.acked for outcome in outcomes)
    assert (stats.published, stats.delivered, stats.pending) == (200, 200, 0)


def test_a_group_failing_on_one_chunk_dead_letters_it_and_the_chunks_taken_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from support.groups import bare_group

    from runtime.core.settlement._dead_letters import DeadLetterQueue
    from runtime.core.settlement._ledger import Ledger
    from runtime.core.subscribers._group import Fifo

    letters = DeadLetterQueue()
    group = bare_group(Ledger(topic="t", ack_timeout=None, max_attempts=1, dead_letters=letters))
    arrivals = group._arrivals
    extend = Fifo.extend

    def extend_but_chunk_two(self: Fifo, envelopes: list[Any]) -> None:
        if any(envelope[0] == 2 for envelope in envelopes):
            raise RuntimeError("books out of order")
        extend(self, envelopes)

    monkeypatch.setattr(Fifo, "extend", extend_but_chunk_two)
    for number in (1, 2, 3):
        arrivals.put(_chunk(number))

    group.on_receive(ARRIVED)

    assert [(d.message_id, d.reason) for d in letters] == [("1", "dropped"), ("2", "dropped"),
                                                           ("3", "dropped")]
    assert all("books out of order" in (d.error or "") for d in letters)
