"""The mailbox messages of the Publisher actor, and the topic seam it publishes through.

All are immutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from runtime.core._topic_actor import Parts
from runtime.errors import PublishError
from runtime.publisher._batching import BatchSettings

__all__ = [
    "BatchTopic",
    "Drain",
    "Flush",
    "Resume",
    "RunDone",
    "SendNow",
    "SetOptions",
    "Tick",
    "checked",
]


class BatchTopic(Protocol):
    """What a Publisher needs from a topic: its name and the topic's one batch call.

    ``_publish_batches(parts)`` takes batches as the parallel lists the Publisher keeps
    (``(datas, attributes, keys)``) and returns a future of one ``(ids, error)`` outcome
    per batch, in order (a local `Topic`, a Redis topic and a remote topic alike).
    """

    @property
    def name(self) -> str: ...

    def _publish_batches(
        self, parts: Sequence[Parts],
    ) -> Future[list[tuple[Sequence[str] | None, BaseException | None]]]: ...


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
class RunDone:
    """Tell, from the topic's future of a run of batches sent together: each batch's ids
    or failure. ``run`` is the list of the batches' ids the run was sent with: its
    identity marks the replies meant for it."""

    run: list[int]
    outcomes: list[tuple[Sequence[str] | None, BaseException | None]]


def checked(
    ids: Sequence[str] | None, error: BaseException | None, count: int,
) -> tuple[Sequence[str] | None, BaseException | None]:
    """A batch's outcome, or an internal error when a confirmation's ids do not match
    its ``count`` messages."""
    if error is None and ids is not None and len(ids) != count:
        return None, PublishError(f"topic returned {len(ids)} ids for {count} messages", 13)
    return ids, error


@dataclass(frozen=True, slots=True, kw_only=True)
class SetOptions:
    """Ask: apply new (already validated) batch thresholds and the ordering switch."""

    batching: BatchSettings
    message_ordering: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Ask: lift the pause on an ordering key."""

    key: str
