"""Topic counters: the mutable tally a ledger keeps and the frozen snapshot users get."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Counters", "TopicStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicStats:
    """A snapshot of one topic's counters (``pending`` is a gauge, the rest count up).

    Attributes:
        published: publishes that passed the closed and type checks.
        delivered: messages every destination acked.
        nacked: failed settlements other than deadline expiries (handler errors included).
        timed_out: expired delivery attempts, also ones later redelivered.
        dead_lettered: dead letters written (evicted ones included).
        throttled: publishes the throttle delayed.
        dropped: group deliveries dropped on a full group.
        lagged: broadcast entries a subscriber skipped.
        redelivered: balanced deliveries sent back to their group.
        pending: messages not settled by every destination yet.
    """

    published: int = 0
    delivered: int = 0
    nacked: int = 0
    timed_out: int = 0
    dead_lettered: int = 0
    throttled: int = 0
    dropped: int = 0
    lagged: int = 0
    redelivered: int = 0
    pending: int = 0


class Counters:
    """The mutable tally behind `TopicStats`; its owner guards it with a lock."""

    __slots__ = (
        "dead_lettered", "delivered", "dropped", "lagged", "nacked",
        "published", "redelivered", "throttled", "timed_out",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Zero every counter."""
        self.published = self.delivered = self.nacked = self.timed_out = 0
        self.dead_lettered = self.throttled = self.dropped = self.lagged = 0
        self.redelivered = 0

    def snapshot(self, pending: int) -> TopicStats:
        """Freeze the counters, with ``pending`` as the gauge."""
        return TopicStats(
            published=self.published, delivered=self.delivered, nacked=self.nacked,
            timed_out=self.timed_out, dead_lettered=self.dead_lettered,
            throttled=self.throttled, dropped=self.dropped, lagged=self.lagged,
            redelivered=self.redelivered, pending=pending,
        )
