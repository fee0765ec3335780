"""Accepted messages on their way from `Publisher.publish` to the Publisher actor."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Protocol

__all__ = ["MAX_QUEUED", "Accepted", "Intake", "Settles", "fail_all", "resolve_all"]

# The most messages the intake holds for the actor: a publisher that finds it full waits
# until the actor takes them (flow control between the two threads). It trades how far
# a publisher runs ahead (every waiting message and its future is more work for each
# garbage collection, and the actor's batches leave later) against one wait per this
# many messages; `python -m benchmarks --only pipeline_pool` measures it.
MAX_QUEUED = 1024
# Each slice of the wait for room: how soon a closed gate is noticed.
_ROOM_SLICE = 0.1


class Settles(Protocol):
    """What a message's id goes to: the future ``publish`` returned, or its share of
    a ``publish_many`` future. Called once per message."""

    def set_result(self, result: str, /) -> None: ...

    def set_exception(self, exception: BaseException | None, /) -> None: ...


# The one shape of an accepted message in the Publisher, from ``publish`` to its batch:
# data, attributes (a private copy), ordering key (None: none), where its id goes, and
# its size (`len(data)` plus the attributes' UTF-8 length).
Accepted = tuple[bytes, "dict[str, str]", "str | None", "Settles | Future[str]", int]


def resolve_all(futures: Sequence[Settles], ids: Sequence[str]) -> None:
    """``set_result`` for each message and id, in order; a future its holder cancelled
    is skipped."""
    for future, message_id in zip(futures, ids, strict=True):
        try:
            future.set_result(message_id)
        except InvalidStateError:  # cancelled: nobody waits for the id
            pass


def fail_all(futures: Sequence[Settles], error: BaseException) -> None:
    """``set_exception`` for each message; a future already done (cancelled) is skipped."""
    for future in futures:
        try:
            future.set_exception(error)
        except InvalidStateError:
            pass


class Intake:
    """A bounded hand-off between publishing threads and the Publisher actor.

    Every method is called holding ``lock``, the flow-control gate's: admission, the
    append and the actor's take are one critical section, so a message is counted by
    the gate exactly when it is in the intake or further on, and order holds across
    threads. A publisher tells the actor to drain only when `add` says so: the first
    message after a take. A burst of publishes is then one mailbox message. A publisher
    that finds it `full` waits for the take (`wait_for_room`).

    The actor's final stop `seal`s the intake: later adds are refused (the caller
    fails its publish), so every accepted message is taken by the actor.
    """

    __slots__ = ("_armed", "_items", "_taken", "sealed")

    def __init__(self, lock: threading.Lock) -> None:
        self._items: list[Accepted] = []
        self._armed = False
        self._taken = threading.Condition(lock)
        self.sealed = False

    @property
    def full(self) -> bool:
        """True while `MAX_QUEUED` messages wait for the actor (and it still takes)."""
        return len(self._items) >= MAX_QUEUED and not self.sealed

    def wait_for_room(self) -> None:
        """Wait (the lock held: released meanwhile) until the actor takes, at most one
        slice; the caller re-checks `full` and told the actor to drain before."""
        self._taken.wait(_ROOM_SLICE)

    def add(self, item: Accepted) -> bool:
        """Append one message; True when the caller must tell the actor to drain."""
        self._items.append(item)
        if self._armed:
            return False
        self._armed = True
        return True

    def take(self) -> list[Accepted]:
        """Every message added so far, in order."""
        items, self._items = self._items, []
        self._armed = False
        if len(items) >= MAX_QUEUED:
            self._taken.notify_all()
        return items

    def seal(self) -> list[Accepted]:
        """`take`, and refuse every later `add` (the actor's final stop)."""
        self.sealed = True
        return self.take()

    def queued(self) -> int:
        """How many messages wait for the actor."""
        return len(self._items)
