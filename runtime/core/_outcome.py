"""What a publish returns: the enqueue-time report and the settled outcome."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

__all__ = [
    "ACKED_OUTCOME", "Nack", "Outcome", "OutcomeTrack", "PublishReport",
]


@dataclass(frozen=True, slots=True)
class Nack:
    """One destination that did not ack a message.

    Attributes:
        destination: ``"group:<name>"``, ``"subscriber:<id>"`` or ``"none"``.
        reason: the category (``"nack"``, ``"timeout"``, ``"error"``, ``"dropped"``, ...).
        error: free text (the nack's reason text or the handler's exception), or None.
    """

    destination: str
    reason: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a message settled: acked by every destination, or the nacks."""

    acked: bool
    nacks: tuple[Nack, ...] = ()


@dataclass(frozen=True, slots=True)
class PublishReport:
    """An enqueue-time snapshot of one publish.

    Attributes:
        message_id: the id the topic gave the message.
        balanced: per balanced group, ``"enqueued"`` or ``"dropped"``.
        broadcast: how many broadcast subscribers the message was written for.
        outcome: resolves with the `Outcome` once every destination settled.
    """

    message_id: str
    balanced: dict[str, str] = field(default_factory=dict)
    broadcast: int = 0
    outcome: Future[Outcome] = field(default_factory=Future)


ACKED_OUTCOME = Outcome(acked=True, nacks=())  # every acked message's outcome

class OutcomeTrack:
    """A message still counting down its destinations' settlements (the tracker's books).

    Args:
        remaining: destinations that have not settled yet.
        future: resolved with the `Outcome` when the last one settles (None: nobody asked).
    """

    __slots__ = ("future", "nacks", "remaining")

    def __init__(self, remaining: int, future: Future[Outcome] | None) -> None:
        self.remaining = remaining
        self.future = future
        self.nacks: list[Nack] | None = None  # made by the first nack (most never see one)

    def nack(self, nack: Nack) -> None:
        """Record one destination's nack."""
        if self.nacks is None:
            self.nacks = []
        self.nacks.append(nack)

    def outcome(self) -> Outcome:
        """The outcome once every destination settled: acked, or the nacks."""
        return Outcome(acked=False, nacks=tuple(self.nacks)) if self.nacks else ACKED_OUTCOME
