"""What a publish returns: the enqueue-time report and the settled outcome."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

__all__ = ["Nack", "Outcome", "PublishReport"]


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
