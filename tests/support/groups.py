"""Shared helpers of the balanced group tests: a group actor driven by hand, in the test's thread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.core._envelope import KEY, Envelope
from runtime.core.settlement._delivery import Delivery, HandOver
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._gate import ARRIVED, Arrivals, Gate
from runtime.core.subscribers._group import GroupActor


class _Mailbox:
    """Stands in for the group's mailbox: the test delivers `ARRIVED` itself."""

    def tell(self, message: Any) -> None:
        pass


class FakeEndpoint:
    """A group member without a thread or process: it records each hand-over's size.

    It holds at most ``window`` deliveries unsettled, in hand-overs of at most ``size``
    (the window when None); ``whole``: it prefers a chunk whole (a cheap worker) rather
    than split. Its load is its unsettled count.
    """

    handovers: int | None = None

    def __init__(self, key: int, window: int = 256, size: int | None = None,
                 whole: bool = False) -> None:
        self.key = self.subscriber_id = key
        self.window = window
        self.size = window if size is None else size
        self.cost: float | None = 0.0 if whole else None  # whole: known to be free
        self.sizes: list[int] = []

    def hand_over(self, sink: Any, group: str, envelopes: Sequence[Any],
                  attempts: list[int] | None) -> tuple[HandOver, list[Delivery[Any]]]:
        return HandOver.of(sink, self.subscriber_id, group, envelopes, attempts)

    def push(self, handover: Any, deliveries: list[Any]) -> None:
        self.sizes.append(len(deliveries))

    def left(self, unsettled: int) -> int:
        return unsettled

    def cap(self) -> int:
        return self.size


def bare_group(ledger: Ledger) -> GroupActor:
    """A group actor (not started) over ``ledger``, with its own arrivals."""
    arrivals = Arrivals()
    arrivals.bind(_Mailbox())  # type: ignore[arg-type]
    return GroupActor("t", "g", Gate(1000), ledger, None, arrivals)  # type: ignore[arg-type]


def group_of(*members: Any) -> GroupActor:
    """A bare group (over a fresh ledger without ack timeout) that ``members`` joined."""
    from runtime.core.settlement._dead_letters import DeadLetterQueue
    from runtime.core.subscribers._group_mail import Join

    ledger = Ledger(topic="t", ack_timeout=None, max_attempts=1, dead_letters=DeadLetterQueue())
    group = bare_group(ledger)
    for member in members:
        group.on_receive(Join(member))
    return group


def publish_chunk(group: GroupActor, chunk: list[Envelope]) -> None:
    """What a publisher's fan-out does, then the group's handling of its cue."""
    group._arrivals.put(chunk, any(envelope[KEY] is not None for envelope in chunk))
    group.on_receive(ARRIVED)
