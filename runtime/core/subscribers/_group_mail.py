"""What a balanced group actor is told: its members' view (`Endpoint`) and its mail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runtime.core._envelope import Envelope
from runtime.core.settlement._delivery import Delivery, HandOver, Sink

__all__ = ["Credit", "End", "Endpoint", "Join", "Leave", "Requeue"]


class Endpoint(Protocol):
    """A member as the group sees it: it takes batches within a credit window.

    ``window`` bounds the deliveries it holds unsettled (its prefetch); ``handovers``,
    when not None, bounds the hand-overs it holds unsettled (a worker process: while it
    is busy, what arrives waits in the group and leaves as one larger hand-over).
    ``cost`` is its handler's measured seconds per message (None: not measured, as for
    thread and pull members): the group gives a whole chunk to one member only while
    every ready member is known to be cheap for it.
    """

    key: int
    subscriber_id: int
    window: int
    handovers: int | None
    cost: float | None

    def left(self, unsettled: int) -> int:
        """Of its ``unsettled`` deliveries, about how many it has yet to finish."""

    def cap(self) -> int:
        """The most deliveries one hand-over may carry now."""

    def hand_over(
        self, sink: Sink, group: str, envelopes: Sequence[Envelope], attempts: list[int] | None,
    ) -> tuple[HandOver, list[Delivery[Any]]]:
        """Its hand-over of ``envelopes`` (settling to ``sink``), for the ledger to
        register, and the deliveries to push with it (none for a worker's `Tranche`,
        which builds them only if something fails)."""

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Hand a registered batch over; must not block."""


@dataclass(frozen=True, slots=True)
class Credit:
    """A member finished ``count`` deliveries (in ``handovers`` hand-overs)."""

    key: int
    count: int
    handovers: int = 1


@dataclass(frozen=True, slots=True)
class Join:
    """Add a member (ask; answered once it takes part in dispatch)."""

    endpoint: Endpoint


@dataclass(frozen=True, slots=True)
class Leave:
    """Remove a member (ask); what it holds stays with it to settle."""

    key: int


@dataclass(frozen=True, slots=True)
class Requeue:
    """Put messages back with the attempt numbers given (the sender forced gate room)."""

    items: tuple[tuple[Envelope, int], ...]


@dataclass(frozen=True, slots=True)
class End:
    """Settle everything queued with ``reason`` and refuse later mail the same way (ask)."""

    reason: str
