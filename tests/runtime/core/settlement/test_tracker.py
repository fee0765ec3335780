"""The tracker and its ledger: accounting under a random mix of settlements (item 12)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import Future

from runtime import Bus, Delivery, Outcome
from runtime.core._envelope import Envelope
from runtime.core.settlement._dead_letters import DeadLetterQueue
from runtime.core.settlement._delivery import Delivery as RawDelivery
from runtime.core.settlement._delivery import HandOver
from runtime.core.settlement._ledger import Ledger


class _Sink:
    def __init__(self) -> None:
        self.told: list[object] = []

    def tell(self, message: object) -> None:
        self.told.append(message)


def _ledger(**kwargs: object) -> tuple[Ledger, DeadLetterQueue]:
    letters = DeadLetterQueue()
    options: dict[str, object] = {"ack_timeout": None, "max_attempts": 1}
    options.update(kwargs)
    return Ledger(topic="t", dead_letters=letters, **options), letters  # type: ignore[arg-type]


def _envelope(seq: int) -> Envelope:
    return (seq, str(seq), seq, None, {}, "t", None)


def _hand(envelopes: list[Envelope], group: str = "g") -> tuple[HandOver, list[RawDelivery[int]]]:
    handover = HandOver(_Sink(), 1, group)
    deliveries: list[RawDelivery[int]] = [
        RawDelivery(e, handover, i, 1) for i, e in enumerate(envelopes)
    ]
    handover.pending = dict(enumerate(deliveries))
    return handover, deliveries


def test_early_ack_cannot_complete_a_message_with_other_destinations() -> None:
    ledger, _ = _ledger()
    envelope = _envelope(1)
    future: Future[Outcome] = Future()
    ledger.reserve([envelope], 2, [future], slotted=False)
    one, [first] = _hand([envelope], "a")
    two, [second] = _hand([envelope], "b")
    ledger.register(one)
    ledger.register(two)

    first.ack()
    ledger.settle([first])

    assert not future.done()
    assert ledger.pending == 1
    second.ack()
    ledger.settle([second])
    assert future.result(timeout=1).acked
    assert (ledger.pending, ledger.stats().delivered) == (0, 1)


def test_single_destination_messages_need_no_track() -> None:
    ledger, letters = _ledger()
    envelopes = [_envelope(n) for n in range(1, 4)]
    ledger.reserve(envelopes, 1, None, slotted=False)
    handover, deliveries = _hand(envelopes)
    ledger.register(handover)

    deliveries[0].ack()
    deliveries[1].nack("bad")
    ledger.settle(deliveries[:2])

    stats = ledger.stats()
    assert (stats.pending, stats.delivered, stats.nacked, stats.dead_lettered) == (1, 1, 1, 1)
    assert [(d.message, d.error) for d in letters] == [(2, "bad")]


def test_deadline_expiry_uses_the_injected_clock() -> None:
    now = [100.0]
    ledger, letters = _ledger(ack_timeout=5.0, clock=lambda: now[0])
    scheduled: list[float] = []
    ledger.bind(schedule=scheduled.append, redeliver=lambda d: None)
    envelope = _envelope(1)
    ledger.reserve([envelope], 1, None, slotted=False)
    handover, [delivery] = _hand([envelope])
    ledger.register(handover)

    now[0] = 104.9
    ledger.expire()
    assert delivery.pending
    now[0] = 105.0
    ledger.expire()

    assert scheduled == [105.0, 105.0]
    assert (delivery.timed_out, ledger.pending) == (True, 0)
    assert [d.reason for d in letters] == ["timeout"]


def test_sweep_force_nacks_only_unsettled_deliveries() -> None:
    ledger, letters = _ledger()
    envelopes = [_envelope(n) for n in range(1, 3)]
    ledger.reserve(envelopes, 1, None, slotted=False)
    handover, deliveries = _hand(envelopes)
    ledger.register(handover)
    deliveries[0].ack()
    ledger.settle([deliveries[0]])

    ledger.close()
    ledger.sweep("closed")

    assert [(d.message, d.reason) for d in letters] == [(2, "closed")]
    assert ledger.pending == 0
    assert not ledger.register(HandOver(_Sink(), 1, "g"))


def test_accounting_invariant_under_a_random_mix_of_settlements() -> None:
    total = 20_000
    acked: Counter[str] = Counter()
    lock = threading.Lock()

    def member(destination: str, seed: int) -> object:
        rng = random.Random(seed)

        def handler(delivery: Delivery[int]) -> None:
            choice = rng.random()
            if choice < 0.7:
                delivery.ack()
                with lock:
                    acked[destination] += 1
            elif choice < 0.8:
                delivery.nack("random")
            elif choice < 0.9:
                raise RuntimeError("random failure")
            # else: ignore it; the deadline settles it

        return handler

    with Bus() as bus:
        topic = bus.create_topic(
            "t", ack_timeout=0.2, max_delivery_attempts=2, broadcast_capacity=total,
            balanced_capacity=total, dead_letter_limit=None,
        )
        for seed, group in enumerate(("a", "a", "b", "b")):
            topic.subscribe(member(f"group:{group}", seed), group=group)
        subscriber = topic.subscribe(member("broadcast", 99))

        for n in range(total):
            topic.publish(n)

        assert topic.join(timeout=60)
        letters = Counter(
            f"group:{d.group}" if d.group else "broadcast" for d in topic.dead_letters
        )
        for destination in ("group:a", "group:b", "broadcast"):
            assert acked[destination] + letters[destination] == total, destination
        stats = topic.stats()
        assert stats.pending == 0
        assert stats.published == total
        assert stats.dead_lettered == sum(letters.values())
        assert stats.delivered <= min(acked.values())
        assert stats.timed_out > 0 and stats.redelivered > 0 and stats.nacked > 0
        assert all(d.subscriber_id == subscriber.id for d in topic.dead_letters if not d.group)


def test_a_list_of_acks_retires_exactly_the_fully_settled_hand_overs() -> None:
    ledger, letters = _ledger()
    envelopes = [_envelope(seq) for seq in range(1, 7)]
    ledger.reserve(envelopes, 1, None, slotted=False)
    done, first = _hand(envelopes[:3])
    open_, second = _hand(envelopes[3:])
    ledger.register(done)
    ledger.register(open_)
    acked = [*first, *second[:2]]  # all of the first hand-over, part of the second
    for delivery in acked:
        delivery.ack()

    ledger.settle(acked)

    assert ledger.pending == 1
    assert ledger.stats().delivered == 5 and len(letters) == 0
    assert (done.id in ledger._live, open_.id in ledger._live) == (False, True)
    assert list(ledger._live) == [open_.id]
    second[2].nack("boom")  # a mixed list takes the per-delivery path
    ledger.settle([second[2]])
    assert ledger.pending == 0 and ledger._live == {}
    assert [d.reason for d in letters] == ["nack"]
