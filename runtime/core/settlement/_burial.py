"""Dead-lettering in a topic's books: messages that never reached a destination, and
the burial of every failed delivery."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from runtime.core._envelope import SEQ, Envelope
from runtime.core._future import resolve
from runtime.core._outcome import Nack, Outcome, OutcomeTrack
from runtime.core._stats import Counters
from runtime.core.settlement._dead_letters import DeadLetterQueue, dead_letter_of
from runtime.core.settlement._delivery import Delivery

__all__ = ["RETRYABLE", "Burial", "Effect", "run_effects"]

# Failures a balanced delivery may be retried after, while attempts remain.
RETRYABLE = frozenset({"nack", "timeout", "error", "worker_crashed"})
_COUNTED = frozenset({"dropped", "lagged"})  # reasons with counters of their own

Effect = Callable[[], Any]


class Burial:
    """The dead-lettering part of the `Ledger`; the ledger owns the lock, the counters,
    the outcome tracks, the pending count and the closed flag (one lock guards them all).
    """

    _topic: str
    _changed: threading.Condition
    _counters: Counters
    _dead_letters: DeadLetterQueue
    _tracks: dict[int, OutcomeTrack]
    pending: int
    closed: bool
    settle: Callable[[Sequence[Delivery[Any]]], None]  # the ledger's

    def dead_letter_unrouted(
        self, envelopes: Sequence[Envelope], futures: list[Future[Outcome]] | None, slotted: bool,
    ) -> None:
        """Dead-letter messages published while the topic had no destination."""
        effects: list[Effect] = []
        outcome = Outcome(acked=False, nacks=(Nack("none", "no_subscribers"),))
        with self._changed:
            for envelope in envelopes:
                self._counters.nacked += 1
                self._bury(Delivery.settled(envelope, -1, None, 0, "no_subscribers"), effects)
            if slotted:
                self.pending -= len(envelopes)
                self._changed.notify_all()
        run_effects(effects)
        for future in futures or ():
            resolve(future, outcome)

    def dead_letter_refused(self, envelope: Envelope, reason: str, error: str | None) -> None:
        """Dead-letter a message refused on its way in (counts as published and nacked)."""
        effects: list[Effect] = []
        with self._changed:
            self._counters.published += 1
            self._counters.nacked += 1
            self._bury(Delivery.settled(envelope, -1, None, 0, reason, error), effects)
        run_effects(effects)

    def settle_unreached(
        self, items: Sequence[tuple[Envelope, int]], reason: str,
        make: Callable[[Envelope, int], Delivery[Any]],
    ) -> None:
        """Apply queued messages (envelope, attempt) that never reached a member, failed
        with ``reason``: as `settle` of their deliveries (``make`` builds one).

        When none can be retried or watched (no outcome, no callback, a bounded
        dead-letter queue), only the letters the queue keeps (the newest) are built:
        closing a topic with a million queued messages builds 10,000, not a million.
        """
        keep, tracks = self._dead_letters.keeps(), self._tracks
        if (
            keep is None or (reason in RETRYABLE and not self.closed) or reason in _COUNTED
            or (tracks and any(envelope[SEQ] in tracks for envelope, _ in items))
        ):  # each message as one delivery: retries, counters, outcomes, callbacks, order
            self.settle([make(envelope, attempt) for envelope, attempt in items])
            return
        with self._changed:
            skipped = max(len(items) - keep, 0)
            self._dead_letters.append_tail(
                [dead_letter_of(make(e, a), self._topic) for e, a in items[skipped:]], skipped)
            self._counters.nacked += len(items)
            self._counters.dead_lettered += len(items)
            self.pending -= len(items)
            self._changed.notify_all()

    def _bury(self, delivery: Delivery[Any], effects: list[Effect]) -> None:
        dead_letter = dead_letter_of(delivery, self._topic)
        self._counters.dead_lettered += 1
        callback = self._dead_letters.append(dead_letter)
        if callback is not None:
            effects.append(lambda: self._dead_letters.notify(callback, dead_letter))


def run_effects(effects: list[Effect]) -> None:
    for effect in effects:
        effect()
