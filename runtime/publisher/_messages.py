"""The mailbox messages of the Publisher actor, and the topic seam it publishes through.

All are immutable. ``Publish`` is a plain tuple because it is sent once per message.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from runtime.core._message import Message
from runtime.publisher._batching import BatchSettings

__all__ = [
    "BatchDone",
    "BatchTopic",
    "Drain",
    "Flush",
    "Publish",
    "Resume",
    "SendNow",
    "SetOptions",
    "Tick",
]


class BatchTopic(Protocol):
    """What a Publisher needs from a topic: its name and a non-blocking batch publish.

    A local `Topic` also has ``_publish_parts(datas, attributes, keys)``, which takes a
    batch as the parallel lists the Publisher keeps; the Publisher uses it when present
    (no `Message` object per message on the way in).
    """

    @property
    def name(self) -> str: ...

    def _publish_batch(self, messages: list[Message]) -> Future[list[str]]: ...


# Tell: one admitted message, its future and its size. A plain tuple: the hot path.
Publish = tuple[Message, "Future[str]", int]


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
class BatchDone:
    """Tell, from the topic's future callback: a sent batch is confirmed or failed."""

    batch_id: int
    result: Future[list[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SetOptions:
    """Ask: apply new (already validated) batch thresholds and the ordering switch."""

    batching: BatchSettings
    message_ordering: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Ask: lift the pause on an ordering key."""

    key: str
