"""Tranches: a worker's hand-over tracked as one record until something fails (issue 13)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from typing import Any

import pytest

from runtime import Bus, Delivery, Nack, Outcome
from runtime.core._envelope import Envelope
from runtime.core.settlement._dead_letters import DeadLetterQueue
from runtime.core.settlement._delivery import ACKED, NACKED, Tranche
from runtime.core.settlement._ledger import Ledger


def _envelopes(count: int) -> list[Envelope]:
    return [(seq, str(seq), seq, None, {}, "t", None) for seq in range(1, count + 1)]


def _ledger(**kwargs: Any) -> tuple[Ledger, DeadLetterQueue]:
    letters = DeadLetterQueue()
    options: dict[str, Any] = {"ack_timeout": None, "max_attempts": 1}
    options.update(kwargs)
    return Ledger(topic="t", dead_letters=letters, **options), letters


def test_a_whole_claim_settles_every_message_without_building_deliveries() -> None:
    ledger, letters = _ledger()
    envelopes = _envelopes(5)
    ledger.reserve(envelopes, 1, None, slotted=False)
    tranche = Tranche(None, 1, "g", envelopes)
    assert ledger.register(tranche) and not tranche.settled()

    assert tranche.claim_whole()
    ledger.settle_whole(tranche)

    assert tranche.unpack() == [] and tranche.settled()
    assert not tranche.claim_whole()  # the token is taken once
    stats = ledger.stats()
    assert (stats.delivered, stats.pending, len(letters)) == (5, 0, 0)


def test_a_whole_claim_completes_tracked_outcomes() -> None:
    ledger, _ = _ledger()
    envelopes = _envelopes(3)
    futures: list[Future[Outcome]] = [Future() for _ in envelopes]
    ledger.reserve(envelopes, 1, futures, slotted=False)
    tranche = Tranche(None, 1, "g", envelopes)
    ledger.register(tranche)

    assert tranche.claim_whole()
    ledger.settle_whole(tranche)

    assert [f.result(timeout=1).acked for f in futures] == [True, True, True]
    assert ledger.stats().pending == 0


def _settle_first_destination(
    ledger: Ledger, envelopes: list[Envelope], nacked: set[int],
) -> Tranche:
    """Hand ``envelopes`` to two destinations; "g" settles its tranche one by one (the
    positions ``nacked`` as "closed", the rest acked). Returns "h"'s tranche, unsettled."""
    settling, waiting = Tranche(None, 1, "g", envelopes), Tranche(None, 2, "h", envelopes)
    ledger.register(settling)
    ledger.register(waiting)
    deliveries = settling.unpack()
    for index, delivery in enumerate(deliveries):
        if index in nacked:
            assert delivery._expire("closed")
        else:
            delivery._claim()
            delivery._state = ACKED
    ledger.settle(deliveries)
    return waiting


def test_whole_claims_of_two_destinations_complete_outcomes_at_the_last_one() -> None:
    ledger, letters = _ledger()
    envelopes = _envelopes(4)
    futures: list[Future[Outcome]] = [Future(), Future()]
    ledger.reserve(envelopes[:2], 2, futures, slotted=False)  # topic.publish: a future each
    ledger.reserve(envelopes[2:], 2, None, slotted=False)  # a Publisher batch: none
    acking = _settle_first_destination(ledger, envelopes, nacked={1, 3})  # "g"
    assert not any(f.done() for f in futures)  # "h" has not settled
    assert acking.claim_whole()
    ledger.settle_whole(acking)

    assert futures[0].result(timeout=1) == Outcome(acked=True)
    assert futures[1].result(timeout=1) == Outcome(
        acked=False, nacks=(Nack("group:g", "closed", None),))
    stats = ledger.stats()
    assert (stats.delivered, stats.pending, [d.reason for d in letters]) == (
        2, 0, ["closed", "closed"])


def test_an_outcome_resolved_by_hand_keeps_no_other_outcome_of_the_tranche_pending() -> None:
    ledger, _ = _ledger()
    envelopes = _envelopes(3)
    futures: list[Future[Outcome]] = [Future() for _ in envelopes]
    ledger.reserve(envelopes, 2, futures, slotted=False)
    acking = _settle_first_destination(ledger, envelopes, nacked={1})
    futures[1].set_result(Outcome(acked=True))  # a caller's misuse: its outcome is taken

    assert acking.claim_whole()
    with pytest.raises(InvalidStateError):
        ledger.settle_whole(acking)

    assert [futures[0].result(timeout=1), futures[2].result(timeout=1)] == [Outcome(acked=True)] * 2
    assert ledger.stats().pending == 0


def test_an_expired_tranche_is_unpacked_and_the_late_whole_ack_loses() -> None:
    now = [100.0]
    ledger, letters = _ledger(ack_timeout=1.0, clock=lambda: now[0])
    envelopes = _envelopes(4)
    ledger.reserve(envelopes, 1, None, slotted=False)
    tranche = Tranche(None, 7, "g", envelopes, [1, 1, 1, 1])
    ledger.register(tranche)

    now[0] += 2.0
    ledger.expire()

    assert not tranche.claim_whole()  # the worker's "all acked" came too late
    deliveries = tranche.unpack()
    assert [d.state for d in deliveries] == [NACKED] * 4
    assert all(d.timed_out and d.subscriber_id == 7 for d in deliveries)
    stats = ledger.stats()
    assert (stats.timed_out, stats.delivered, stats.pending) == (4, 0, 0)
    assert [letter.reason for letter in letters] == ["timeout"] * 4


def test_unpacked_deliveries_carry_their_attempts_and_settle_one_by_one() -> None:
    ledger, letters = _ledger()
    envelopes = _envelopes(3)
    ledger.reserve(envelopes, 1, None, slotted=False)
    tranche = Tranche(None, 1, "g", envelopes, [2, 1, 3])
    ledger.register(tranche)

    first, second, third = tranche.unpack()
    first._claim()
    first._state = ACKED
    assert second._expire("closed") and third._expire("closed")
    ledger.settle([first, second, third])

    assert [d.attempt for d in (first, second, third)] == [2, 1, 3]
    assert tranche.settled() and tranche.unpack() == [first, second, third]
    assert (ledger.stats().delivered, len(letters), ledger.stats().pending) == (1, 2, 0)


def test_racing_whole_claims_and_unpacks_have_exactly_one_winner() -> None:
    for _ in range(200):
        tranche = Tranche(None, 1, "g", _envelopes(50))
        start = threading.Barrier(2)
        won: list[bool] = []

        thread = threading.Thread(target=_claim_after, args=(start, tranche, won))
        thread.start()
        start.wait(timeout=5)
        built = tranche.unpack()
        thread.join(timeout=5)

        assert won == [not built]
        assert len(built) in (0, 50)


@pytest.mark.timeout(60)
def test_an_all_acked_hand_over_to_a_worker_builds_no_delivery_in_the_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = [0]
    original = Delivery.__init__

    def counting(self: Delivery[Any], *args: Any) -> None:
        built[0] += 1
        original(self, *args)

    with Bus() as bus:
        topic = bus.create_topic("orders", ack_timeout=30.0)
        topic.subscribe(_ignore, group="g", workers=1, auto_ack=True)
        monkeypatch.setattr(Delivery, "__init__", counting)  # the parent's class only

        for number in range(200):
            topic.publish(number)

        assert topic.join(timeout=30)
        stats = topic.stats()
        assert (stats.delivered, stats.pending, stats.dead_lettered) == (200, 0, 0)
        assert built[0] == 0


def _claim_after(start: threading.Barrier, tranche: Tranche, won: list[bool]) -> None:
    start.wait(timeout=5)
    won.append(tranche.claim_whole())


def _ignore(delivery: Delivery[Any]) -> None:
    """The worker's handler: nothing (auto-ack)."""
