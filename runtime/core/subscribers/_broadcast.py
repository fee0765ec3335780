"""The broadcast subscriber actor: reads the topic's ring from its own cursor."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from actors import Actor, Ref
from runtime.core._envelope import Envelope
from runtime.core.settlement._delivery import Delivery, HandOver
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._flusher import CallLater, Flusher
from runtime.core.subscribers._member import Handler, Seat, run_handler
from runtime.core.subscribers._ring import Ring

__all__ = ["WAKE", "BroadcastActor", "hand_over"]


@dataclass(frozen=True, slots=True)
class _Wake:
    """The ring has entries for this subscriber."""


WAKE = _Wake()


def hand_over(
    envelopes: list[Envelope], subscriber_id: int, ledger: Ledger, tracker: Ref,
    attempts: list[int] | None = None,
) -> tuple[HandOver, list[Delivery[Any]]] | None:
    """Make broadcast deliveries (first attempts unless ``attempts`` says otherwise) and
    register them; None (all nacked ``closed``) if closed."""
    handover = HandOver(tracker, subscriber_id, None)
    deliveries: list[Delivery[Any]] = (
        [Delivery(e, handover, i, 1) for i, e in enumerate(envelopes)] if attempts is None
        else [Delivery(e, handover, i, a) for i, (e, a) in enumerate(zip(envelopes, attempts, strict=True))]
    )
    handover.hold(dict(enumerate(deliveries)))
    if ledger.register(handover):
        return handover, deliveries
    for delivery in deliveries:
        delivery._expire("closed")
    ledger.settle(deliveries)
    return None


class BroadcastActor(Actor):
    """One broadcast subscriber: takes what the ring has for it, runs the handler on it.

    Args:
        ring: the topic's ring (it was added with a wake that tells this actor `WAKE`).
        seat: its place (subscription id, thread).
        handler: called with each `Delivery`.
        auto_ack: ack on return, nack on exception.
        ledger: the topic's books.
        tracker: the tracker actor.
        call_later: the bus's timer (its settlements leave while a batch runs).
    """

    def __init__(
        self, ring: Ring, seat: Seat, handler: Handler, auto_ack: bool,
        ledger: Ledger, tracker: Ref, call_later: CallLater,
    ) -> None:
        super().__init__()
        self._flusher = Flusher(call_later)
        self._ring = ring
        self._seat = seat
        self._subscriber_id = seat.subscriber_id
        self._handler = handler
        self._auto_ack = auto_ack
        self._ledger = ledger
        self._tracker = tracker

    def on_start(self) -> None:
        """Note the thread, so an unsubscribe from inside a handler does not wait on it."""
        self._seat.thread = threading.get_ident()

    def on_receive(self, message: Any) -> Any:
        """On `WAKE`: handle one batch, then wake itself again until the ring is drained."""
        taken = self._ring.read(self._subscriber_id, self._ring.capacity)
        if not taken or not taken[0]:
            return None
        envelopes, attempts = taken
        batch = hand_over(envelopes, self._subscriber_id, self._ledger, self._tracker, attempts)
        if batch is not None:
            run_handler(self._handler, self._auto_ack, *batch, flusher=self._flusher)
        # Another mailbox round trip (not a loop) so a stop queued meanwhile is honoured.
        self.ref.tell(WAKE)
        return None
