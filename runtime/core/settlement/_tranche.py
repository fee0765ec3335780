"""A hand-over tracked as one record: no per-message object unless something fails.

A worker process gets its messages as one `Tranche`. While nothing has gone wrong, the
parent holds only the envelopes and their attempt numbers; the worker's "all acked"
answer settles the whole tranche with one atomic claim. Per-message `Delivery` objects
are built (`unpack`) only when they are needed: a partial answer, a crashed worker,
an expired deadline or the close sweep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import count, repeat
from typing import Any

from runtime.core._envelope import Envelope
from runtime.core.settlement._delivery import Delivery, HandOver, Sink

__all__ = ["Tranche"]


class Tranche(HandOver):
    """Messages handed to one worker at once, settled whole on the all-acked path.

    Exactly one of `claim_whole` (the worker acked everything) and `unpack` (anything
    else) wins the tranche's token: the winner of `claim_whole` settles every message;
    after `unpack`, each `Delivery` is claimed alone through ``pending`` as in any
    hand-over. ``pending`` stays empty until then, so the ledger must not read an empty
    ``pending`` as "settled" for a tranche whose token is still there (`settled`).

    Args:
        sink: where settlements go (the tracker).
        subscriber_id: the subscription the batch is for.
        group: the balanced group.
        envelopes: the messages, in index order.
        attempts: each message's attempt number (None: all first attempts).
        number: its place among its worker's hand-overs.
        started: reports the seconds since the worker started it (its ack deadline
            counts from then; ``-inf``: not started yet).
    """

    __slots__ = ("_built", "_lock", "_whole", "attempts", "envelopes", "number")

    def __init__(
        self, sink: Sink | None, subscriber_id: int, group: str | None,
        envelopes: Sequence[Envelope], attempts: list[int] | None = None, *,
        number: int = 0, started: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(sink, subscriber_id, group)
        self.envelopes = envelopes
        self.attempts = attempts
        self.number = number
        self.started = started
        self._whole: dict[int, bool] = {0: True}  # the token: popped once, atomically
        self._built: list[Delivery[Any]] = []
        self._lock = threading.Lock()  # lets a losing `unpack` wait for the builder

    def run_by_worker(self, number: int, started: Callable[[], float]) -> None:
        """It is its worker's hand-over ``number``; ``started`` reports the seconds since
        the worker started it (its ack deadline counts from then)."""
        self.number = number
        self.count_from(started)

    def claim_whole(self) -> bool:
        """Claim every message as settled at once; False when `unpack` came first."""
        return self._whole.pop(0, None) is not None

    def whole(self) -> bool:
        """True while no `Delivery` was built for it (`claim_whole` may still win)."""
        return 0 in self._whole

    def settled(self) -> bool:
        """True when nothing of it is pending any more."""
        return 0 not in self._whole and not self.pending

    def unpack(self) -> list[Delivery[Any]]:
        """The per-message deliveries, built on first call (all pending then).

        Empty when `claim_whole` won. Thread-safe: concurrent callers get the same list.
        """
        with self._lock:
            if self._whole.pop(0, None) is not None:
                attempts: Sequence[int] | repeat[int] = (
                    repeat(1) if self.attempts is None else self.attempts
                )
                built: list[Delivery[Any]] = list(
                    map(Delivery, self.envelopes, repeat(self), count(), attempts)
                )
                self.hold(dict(enumerate(built)))
                self._built = built
            return self._built

    def unsettled(self) -> dict[int, Delivery[Any]]:
        """The deliveries nothing has claimed yet (building them if needed)."""
        self.unpack()
        return self.pending
