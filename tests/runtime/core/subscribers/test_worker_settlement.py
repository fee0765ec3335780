"""Process members settle what they ran, as the worker ran it (DESIGN §3.11).

A hand-over's ack deadline counts from when its worker starts it, so a delivery the
parent timed out is never acked "ok" in the worker; a message that does not pickle, or
does not unpickle in the worker, fails alone.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from runtime import Bus, Delivery
from runtime.errors import SettlementError


class _SlowToPickle:
    """A message whose pickling takes longer than the topic's ack timeout."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        time.sleep(0.8)  # sleep-ok: slow pickling in the parent, not a synchronisation
        return (str, ("slow",))


class _FailsToLoad:
    """A message that pickles in the parent and fails to unpickle in the worker."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (int, ("not a number",))


def _settlements(directory: Path) -> dict[str, set[str]]:
    """What the handlers wrote: ``{"ok": ids acked, "late": ids refused}``."""
    seen: dict[str, set[str]] = {"ok": set(), "late": set()}
    for path in directory.iterdir():
        for line in path.read_text().split():
            kind, message_id = line.split(":")
            seen[kind].add(message_id)
    return seen


def test_a_hand_over_waiting_behind_a_slow_one_is_never_acked_after_it_timed_out(
    tmp_path: Path,
) -> None:
    directory = str(tmp_path)

    def handler(delivery: Delivery[int]) -> None:
        if delivery.message == 0:
            time.sleep(1.0)  # sleep-ok: slow work past the ack deadline, not a synchronisation
        try:
            delivery.ack()
            kind = "ok"
        except SettlementError:
            kind = "late"
        with open(f"{directory}/{threading.get_native_id()}", "a") as out:
            out.write(f"{kind}:{delivery.message_id}\n")

    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.5)
        topic.subscribe(handler, group="g", workers=1)
        reports = [topic.publish(n) for n in range(12)]
        outcomes = [r.outcome.result(timeout=30) for r in reports]
        timed_out = {d.message_id for d in topic.dead_letters if d.reason == "timeout"}

    seen = _settlements(tmp_path)
    assert seen["ok"].isdisjoint(timed_out)
    assert reports[0].message_id in timed_out
    # The second hand-over waited in the worker behind the slow first one: its deadline
    # started when the worker started it, so it ran and was acked in time.
    assert all(o.acked for o in outcomes[4:8])
    assert {r.message_id for r in reports[4:]} <= seen["ok"]


def test_a_process_members_deadline_starts_when_the_worker_starts_the_delivery() -> None:
    ran: list[Any] = []

    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.4)
        topic.subscribe(lambda d: ran.append(d.message), group="g", workers=1, auto_ack=True)
        report = topic.publish(_SlowToPickle())
        outcome = report.outcome.result(timeout=30)
        letters = list(topic.dead_letters)

    assert outcome.acked
    assert letters == []


def test_a_message_that_does_not_pickle_fails_alone() -> None:
    messages: list[Any] = [*range(300), threading.Lock(), *range(300, 600)]

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(lambda d: None, group="g", workers=1, auto_ack=True)
        reports = [topic.publish(m) for m in messages]
        outcomes = [r.outcome.result(timeout=30) for r in reports]
        letters = list(topic.dead_letters)

    assert [o.acked for o in outcomes].count(True) == 600
    assert not outcomes[300].acked
    assert [(d.message_id, d.reason) for d in letters] == [(reports[300].message_id, "error")]


def test_a_message_that_does_not_unpickle_in_the_worker_fails_alone() -> None:
    messages: list[Any] = [*range(200), _FailsToLoad(), *range(200, 400)]

    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(lambda d: None, group="g", workers=1, auto_ack=True)
        reports = [topic.publish(m) for m in messages]
        outcomes = [r.outcome.result(timeout=30) for r in reports]
        letters = list(topic.dead_letters)
        stats = topic.stats()

    assert [o.acked for o in outcomes].count(True) == 400
    assert [(d.message_id, d.reason) for d in letters] == [(reports[200].message_id, "error")]
    assert "ValueError" in (letters[0].error or "")
    assert stats.delivered == 400 and stats.nacked == 1
