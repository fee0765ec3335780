"""Accepted messages on their way from `Publisher.publish` to the Publisher actor.

A message is accepted in a run of messages from one call: one for ``publish``, all of
them for ``publish_many``. The run is the one shape of accepted messages in the
Publisher (`Accepted`), from the call through the intake into batches, which keep the
slice of it they hold (`Slice`): no object per message but its data.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError

from runtime.publisher._bulk import Bulk

__all__ = ["MAX_QUEUED", "Accepted", "Intake", "Sink", "Slice", "fail_slice", "resolve_slice"]

# The most messages the intake holds for the actor: a publisher that finds it full waits
# until the actor takes them (flow control between the two threads). It trades how far
# a publisher runs ahead (every waiting message is more work for each garbage
# collection, and the actor's batches leave later) against one wait per this many
# messages; `python -m benchmarks --only pipeline_pool` measures it.
MAX_QUEUED = 1024
# Each slice of the wait for room: how soon a closed gate is noticed.
_ROOM_SLICE = 0.1

# Where the ids of a run go: the future ``publish`` returned (a run of one, as the
# Publisher hands it over), the futures of consecutive ``publish`` calls (a run the
# intake gathered, one future per message), or a ``publish_many``'s `Bulk`.
Sink = Future[str] | list[Future[str]] | Bulk
# Messages accepted together, all with the same attributes (a private copy, or the one
# shared empty mapping) and ordering key (None: none): their data, that attributes and
# key, their sink, the index of the first of them in the sink's call (or list), and each
# one's size (`len(data)` plus the attributes' UTF-8 length).
Accepted = tuple["Sequence[bytes]", "dict[str, str]", "str | None", Sink, int, "Sequence[int]"]
# Part of a run in a batch: its sink, the index of its first message in the sink's call,
# and how many messages.
Slice = tuple[Sink, int, int]


def resolve_slice(sink: Sink, first: int, ids: Sequence[str]) -> None:
    """The messages of a slice, from ``first`` on, are confirmed with ``ids``; a future
    its holder cancelled is skipped."""
    if isinstance(sink, Bulk):
        sink.resolve(first, ids)
        return
    if not isinstance(sink, list):  # a lone publish's future
        try:
            sink.set_result(ids[0])
        except InvalidStateError:  # cancelled: nobody waits for the id
            pass
        return
    for future, message_id in zip(sink[first:first + len(ids)], ids, strict=True):
        try:
            future.set_result(message_id)
        except InvalidStateError:
            pass


def fail_slice(sink: Sink, first: int, count: int, error: BaseException) -> None:
    """The ``count`` messages of a slice, from ``first`` on, failed with ``error``."""
    if isinstance(sink, Bulk):
        sink.fail(count, error)
        return
    for future in sink[first:first + count] if isinstance(sink, list) else [sink]:
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
    run after a take. A burst of publishes is then one mailbox message, and one run
    while their attributes and key match: `add` appends each ``publish`` to the run
    before it, so the actor batches and settles the burst a run at a time. A publisher
    that finds the intake `full` waits for the take (`wait_for_room`).

    The actor's final stop `seal`s the intake: later adds are refused (the caller
    fails its publish), so every accepted message is taken by the actor.
    """

    __slots__ = ("_armed", "_count", "_runs", "_taken", "full", "sealed")

    def __init__(self, lock: threading.Lock) -> None:
        self._runs: list[Accepted] = []
        self._count = 0  # messages in the runs
        self._armed = False
        self._taken = threading.Condition(lock)
        self.sealed = False
        # True while `MAX_QUEUED` messages wait for the actor (and it still takes).
        self.full = False

    def wait_for_room(self) -> None:
        """Wait (the lock held: released meanwhile) until the actor takes, at most one
        slice; the caller re-checks `full` and told the actor to drain before."""
        self._taken.wait(_ROOM_SLICE)

    def add(self, run: Accepted) -> bool:
        """Append one run; True when the caller must tell the actor to drain."""
        datas, attributes, key, sink, _, sizes = run
        last = self._runs[-1] if self._runs else None
        if (
            last is not None and isinstance(sink, Future) and not isinstance(last[3], Bulk)
            and last[1] is attributes and last[2] == key
        ):  # a publish like the one before: gathered into a run of publishes
            if isinstance(last[3], list):
                last[0].append(datas[0])  # type: ignore[attr-defined]
                last[3].append(sink)
                last[5].append(sizes[0])  # type: ignore[attr-defined]
            else:
                self._runs[-1] = ([last[0][0], datas[0]], attributes, key, [last[3], sink], 0,
                                  [last[5][0], sizes[0]])
        else:
            self._runs.append(run)
        self._count += len(datas)
        self.full = self._count >= MAX_QUEUED and not self.sealed
        if self._armed:
            return False
        self._armed = True
        return True

    def take(self) -> list[Accepted]:
        """Every run added so far, in order."""
        runs, self._runs = self._runs, []
        full = self._count >= MAX_QUEUED
        self._count = 0
        self._armed = False
        self.full = False
        if full:
            self._taken.notify_all()
        return runs

    def seal(self) -> list[Accepted]:
        """`take`, and refuse every later `add` (the actor's final stop)."""
        self.sealed = True
        return self.take()

    def queued(self) -> int:
        """How many messages wait for the actor."""
        return self._count
