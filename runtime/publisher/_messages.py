"""The mailbox messages of the Publisher actor, and the topic seam it publishes through.

All are immutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from runtime.core._topic_actor import Parts
from runtime.publisher._batching import BatchSettings

__all__ = [
    "BatchTopic",
    "Drain",
    "Flush",
    "Outcome",
    "Resume",
    "SendNow",
    "SetOptions",
    "Tick",
]

# What the topic says of one batch: its ids, or the failure (with ids: only a prefix of
# the batch was accepted).
Outcome = tuple["Sequence[str] | None", "BaseException | None"]


class BatchTopic(Protocol):
    """What a Publisher needs from a topic: its name and the topic's one batch call.

    ``_publish_batches(parts)`` takes batches as the parallel lists the Publisher keeps
    (``(datas, attributes, keys)``) and returns a future of one ``(ids, error)`` outcome
    per batch, in order (a local `Topic`, a Redis topic and a remote topic alike).
    """

    @property
    def name(self) -> str: ...

    def _publish_batches(self, parts: Sequence[Parts]) -> Future[list[Outcome]]: ...


@dataclass(frozen=True, slots=True)
class Drain:
    """Tell: the intake went from empty to non-empty; batch what it holds."""


@dataclass(frozen=True, slots=True)
class SendNow:
    """Tell: close every open batch now."""


@dataclass(frozen=True, slots=True)
class Tick:
    """Tell, from the ticker: a batch deadline has passed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Flush:
    """Tell: close every open batch; resolve ``done`` once every closed batch settled."""

    done: Future[None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SetOptions:
    """Ask: apply new (already validated) batch thresholds and the ordering switch."""

    batching: BatchSettings
    message_ordering: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Ask: lift the pause on an ordering key."""

    key: str
