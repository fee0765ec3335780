"""The mailbox messages of the Publisher actor, and the topic seam it publishes through.

All are immutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from runtime.core._message import Message
from runtime.core._publishing import PartlyPublished
from runtime.errors import PublishError
from runtime.publisher._batching import BatchSettings

__all__ = [
    "BatchDone",
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
    """What a Publisher needs from a topic: its name and a non-blocking batch publish.

    A local `Topic` also has ``_publish_parts(datas, attributes, keys)``, which takes a
    batch as the parallel lists the Publisher keeps; the Publisher uses it when present
    (no `Message` object per message on the way in).
    """

    @property
    def name(self) -> str: ...

    def _publish_batch(self, messages: list[Message]) -> Future[Sequence[str]]: ...


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
    """Tell, from the topic's reply to a run of batches sent together: each batch's ids
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
class BatchDone:
    """Tell, from the topic's future callback: a sent batch is confirmed or failed."""

    batch_id: int
    result: Future[Sequence[str]]

    def outcome(self, count: int) -> tuple[Sequence[str] | None, BaseException | None]:
        """The ids of the batch's ``count`` messages, or the error that fails them all;
        both when the topic accepted only a prefix of the batch."""
        try:
            ids = self.result.result(timeout=0)
        except PartlyPublished as partial:
            return partial.ids, partial.error
        except BaseException as exc:  # CancelledError included: the batch failed
            return None, exc
        return checked(ids, None, count)


@dataclass(frozen=True, slots=True, kw_only=True)
class SetOptions:
    """Ask: apply new (already validated) batch thresholds and the ordering switch."""

    batching: BatchSettings
    message_ordering: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Ask: lift the pause on an ordering key."""

    key: str
