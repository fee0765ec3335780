"""Ordering-key sequencing and the publisher's single ticker."""

from __future__ import annotations

import threading

from runtime.publisher._actor import Ticker
from runtime.publisher._batching import Batch
from runtime.publisher._sequencer import KeySequencer


def batch(batch_id: int, key: str | None) -> Batch:
    return Batch(id=batch_id, key=key, created_at=0.0)


def test_unkeyed_batches_are_never_held_back() -> None:
    sequencer = KeySequencer()

    sent = [sequencer.submit(batch(i, None)) for i in range(3)]

    assert [b.id for b in sent if b is not None] == [0, 1, 2]


def test_one_batch_in_flight_per_key_then_strictly_in_order() -> None:
    sequencer = KeySequencer()
    a1, a2, a3, b1 = batch(1, "A"), batch(2, "A"), batch(3, "A"), batch(4, "B")

    sent_now = [sequencer.submit(b) for b in (a1, a2, a3, b1)]
    after_a1 = sequencer.complete("A")
    after_a2 = sequencer.complete("A")
    after_a3 = sequencer.complete("A")

    assert sent_now == [a1, None, None, b1]
    assert (after_a1, after_a2, after_a3) == (a2, a3, None)
    assert sequencer.submit(batch(5, "A")) is not None  # idle again


def test_pause_returns_the_queue_and_resume_is_idempotent() -> None:
    sequencer = KeySequencer()
    a1, a2, a3 = batch(1, "A"), batch(2, "A"), batch(3, "A")
    for b in (a1, a2, a3):
        sequencer.submit(b)

    queued = sequencer.pause("A")

    assert queued == [a2, a3]
    assert sequencer.paused == frozenset({"A"})
    assert sequencer.is_paused("A") and not sequencer.is_paused("B")
    assert sequencer.resume("B") is False
    assert sequencer.resume("A") is True
    assert sequencer.resume("A") is False
    assert sequencer.paused == frozenset()
    assert sequencer.submit(batch(4, "A")) is not None


def test_drain_returns_every_queued_batch() -> None:
    sequencer = KeySequencer()
    for i, key in enumerate(["A", "A", "B", "B", "B"]):
        sequencer.submit(batch(i, key))

    assert sorted(b.id for b in sequencer.drain()) == [1, 3, 4]
    assert sequencer.complete("A") is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now


def test_ticker_fires_once_the_clock_passes_the_earliest_deadline() -> None:
    clock = FakeClock()
    fired = threading.Event()
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(clock())
        fired.set()

    ticker = Ticker(tick, clock=clock)
    ticker.start()
    try:
        ticker.schedule(5.0)
        ticker.schedule(2.0)  # earlier wins
        ticker.schedule(9.0)  # later is ignored
        assert not fired.wait(0.05)
        clock.now = 2.0

        assert fired.wait(5.0)
    finally:
        ticker.stop()

    assert ticks == [2.0]


def test_ticker_stop_ends_its_thread() -> None:
    ticker = Ticker(lambda: None, name="stop-me")
    ticker.start()

    ticker.stop(timeout=5.0)

    assert not any(t.name == "stop-me" for t in threading.enumerate())
