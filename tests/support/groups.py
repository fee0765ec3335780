"""Shared helpers of the balanced group tests: a group actor driven by hand, in the test's thread."""

from __future__ import annotations

from typing import Any

from runtime.core._envelope import Envelope
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._arrivals import ARRIVED, Arrivals
from runtime.core.subscribers._gate import Gate
from runtime.core.subscribers._group import GroupActor


class _Mailbox:
    """Stands in for the group's mailbox: the test delivers `ARRIVED` itself."""

    def tell(self, message: Any) -> None:
        pass


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
    group._arrivals.put(chunk)
    group.on_receive(ARRIVED)
