"""Accepted messages on their way from `Publisher.publish` to the Publisher actor.

A message is accepted in a run of messages: consecutive ``publish`` calls alike
(`Intake.put` appends each to the run before it), or all of a ``publish_many``. The run
is the one shape of accepted messages in the Publisher (`Accepted`), from the intake
into batches, which keep the slice of it they hold (`Slice`): no object per message but
its data and a weak reference to its future. `Bulk` is the one future of a
``publish_many``.

The Publisher holds each ``publish`` future weakly (`PublishFuture`). Nobody can learn
the outcome of a future nobody holds: one its caller dropped is freed at once, young,
and never resolved, so a fire-and-forget publisher costs neither the resolution nor the
garbage collector's work of carrying every future until its batch is confirmed. A done
callback is a holder too: adding one makes the Publisher keep the future until it is
done. ``python -m benchmarks --only pipeline_pool`` measures both sides (``/kept``
keeps every future).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any
from weakref import ReferenceType, ref

from runtime.core._future import MessageFuture
from runtime.errors import PublishError, WouldBlock
from runtime.publisher._flow_control import FlowGate

__all__ = [
    "MAX_QUEUED", "Accepted", "Bulk", "Intake", "PublishFuture", "Sink", "Slice", "fail_slice",
    "resolve_slice",
]

# The most messages the intake holds for the actor: a publisher that finds it full waits
# until the actor takes them (flow control between the two threads). It trades how far
# a publisher runs ahead (every waiting message is more work for each garbage
# collection, and the actor's batches leave later) against one wait per this many
# messages; `python -m benchmarks --only pipeline_pool` measures it.
MAX_QUEUED = 1024
# Each slice of the wait for room: how soon a closed gate is noticed.
_ROOM_SLICE = 0.1



class PublishFuture(MessageFuture[str]):
    """The future of one ``publish`` (its message id), held weakly by its Publisher.

    Attributes:
        kept: where a future with a done callback is kept until it is done, so the
            callback runs even when its caller dropped the future (`Intake.kept`, set by
            `Intake.put`; None: not kept). The future leaves ``kept`` when it is done.
    """

    kept: set[Future[Any]] | None = None

    def add_done_callback(self, fn: Callable[[Future[str]], object]) -> None:
        """`Future.add_done_callback`; the future is kept until it is done."""
        kept = self.kept
        if kept is not None and not self.done() and self not in kept:
            kept.add(self)
            super().add_done_callback(kept.discard)
        super().add_done_callback(fn)


class Bulk:
    """Gathers the ids of a ``publish_many`` call's ``count`` messages into one future.

    The Publisher settles each message exactly once, in slices (the part of the call one
    batch holds). The future resolves with every id, in publish order, once the last
    one is confirmed; it fails with the first failure (later slices are still counted
    down, so the call leaves nothing waiting).

    Args:
        count: how many messages the call published (0 resolves at once with ``[]``).
    """

    __slots__ = ("_ids", "_lock", "_remaining", "future")

    def __init__(self, count: int) -> None:
        self.future: Future[list[str]] = MessageFuture()
        self._ids: list[str] = [""] * count
        self._remaining = count
        # Slices settle in the actor's thread, but a stopping Publisher or a refused
        # admission fails some from a publishing thread: the count is kept under a lock.
        self._lock = threading.Lock()
        if count == 0:
            self.future.set_result([])

    def resolve(self, first: int, ids: Sequence[str]) -> None:
        """Messages ``first`` to ``first + len(ids) - 1`` are confirmed with ``ids``."""
        with self._lock:
            self._ids[first:first + len(ids)] = ids
            self._remaining -= len(ids)
            last = self._remaining == 0
        if last:
            _settle_once(lambda: self.future.set_result(self._ids))

    def fail(self, count: int, error: BaseException) -> None:
        """``count`` messages of the call failed with ``error``."""
        with self._lock:
            self._remaining -= count
        _settle_once(lambda: self.future.set_exception(error))


def _settle_once(settle: Callable[[], None]) -> None:
    try:
        settle()
    except InvalidStateError:  # failed before
        pass


# Where the ids of a run go: weak references to the futures of its ``publish`` calls (one
# per message), or a ``publish_many``'s `Bulk`.
Sink = list[ReferenceType[Future[str]]] | Bulk
# Messages accepted together, all with the same attributes (a private copy, or the one
# shared empty mapping) and ordering key (None: none): their data, that attributes and
# key, their sink, the index of the first of them in the sink's call (or list), and each
# one's size (`len(data)` plus the attributes' UTF-8 length).
Accepted = tuple["list[bytes]", "dict[str, str]", "str | None", Sink, int, "list[int]"]
# Part of a run in a batch: its sink, the index of its first message in the sink's call,
# and how many messages.
Slice = tuple[Sink, int, int]


def resolve_slice(sink: Sink, first: int, ids: Sequence[str]) -> None:
    """The messages of a slice, from ``first`` on, are confirmed with ``ids``; a future
    nobody holds any more is skipped. Each is resolved here only, once (a `PublishFuture`
    cannot be cancelled)."""
    if isinstance(sink, Bulk):
        sink.resolve(first, ids)
        return
    refs = sink if first == 0 and len(ids) == len(sink) else sink[first:first + len(ids)]
    for future_ref, message_id in zip(refs, ids, strict=True):
        future = future_ref()
        if future is not None:
            future.set_result(message_id)


def fail_slice(sink: Sink, first: int, count: int, error: BaseException) -> None:
    """The ``count`` messages of a slice, from ``first`` on, failed with ``error``."""
    if isinstance(sink, Bulk):
        sink.fail(count, error)
        return
    for future_ref in sink[first:first + count]:
        future = future_ref()
        if future is None:  # nobody holds it
            continue
        try:
            future.set_exception(error)
        except InvalidStateError:
            pass


class Intake:
    """A bounded hand-off between publishing threads and the Publisher actor.

    Every method runs holding the flow-control gate's lock (`put` takes it; the
    others' callers hold it): admission, the append and the actor's take are one
    critical section, so a message is counted by the gate exactly when it is in the
    intake or further on, and order holds across threads. A publisher tells the actor
    to drain only when `put` or `add` says so: the first message after a take. A burst
    of publishes is then one mailbox message, and one run while their attributes and key
    match: `put` appends each ``publish`` to the run before it (with ``ordering``, to the
    last run of its key: keys are lanes of their own), so the actor batches and settles
    the burst a run at a time. A publisher that finds the intake `full` waits for the
    take (`wait_for_room`).

    The actor's final stop `seal`s the intake: later adds are refused (the caller
    fails its publish), so every accepted message is taken by the actor.

    Args:
        gate: the flow-control gate every message is admitted by.
        ordering: whether the Publisher gives ordering keys lanes of their own.
    """

    __slots__ = ("_armed", "_count", "_gate", "_open", "_runs", "_taken", "full", "kept",
                 "ordering", "sealed")

    def __init__(self, gate: FlowGate, *, ordering: bool = False) -> None:
        self._gate = gate
        self._runs: list[Accepted] = []
        # The runs of publishes `put` extends, by ordering key: only the last run without
        # ordering (order holds across keys in the one lane), the last of each key with it
        # (each key is its own lane: a run per key keeps the order that matters).
        self._open: dict[str | None, Accepted] = {}
        self.ordering = ordering  # changed by `reopen`, under the gate's lock
        self._count = 0  # messages in the runs
        self._armed = False
        self._taken = threading.Condition(gate.lock)
        self.sealed = False
        # True while `MAX_QUEUED` messages wait for the actor (and it still takes).
        self.full = False
        # `PublishFuture`s with done callbacks, kept until done (set operations are atomic).
        self.kept: set[Future[Any]] = set()

    def put(
        self, data: bytes, attributes: dict[str, str], key: str | None, future: PublishFuture,
        size: int,
    ) -> bool:
        """Admit one publish and append it, unless it would have to wait; True when the
        caller must tell the actor to drain. Takes the gate's lock. The intake holds
        ``future`` weakly and keeps it (in `kept`) once it has a done callback, whether
        or not this call admits it.

        Raises:
            WouldBlock: flow control or a full intake would make it wait (nothing was
                admitted): the caller admits it by `FlowGate.acquire` instead.
            BaseException: the gate's error once closed; `PublishError` code 9 once sealed.
        """
        future.kept = self.kept
        gate = self._gate
        with gate.lock:
            if self.full or not gate.admit_one(size):
                raise WouldBlock("the publish waits for flow control")
            if self.sealed:  # the actor stopped for good
                gate.release_locked(1, size)
                raise PublishError("Publisher is closed", 9)
            run = self._open.get(key)
            if run is not None and run[1] is attributes:
                run[0].append(data)
                run[3].append(ref(future))  # type: ignore[union-attr]
                run[5].append(size)
            else:
                run = ([data], attributes, key, [ref(future)], 0, [size])
                self._runs.append(run)
                if not self.ordering:
                    self._open.clear()
                self._open[key] = run
            self._count += 1
            if self._count >= MAX_QUEUED:
                self.full = True
            if self._armed:
                return False
            self._armed = True
            return True

    def wait_for_room(self) -> None:
        """Wait (the lock held: released meanwhile) until the actor takes, at most one
        slice; the caller re-checks `full` and told the actor to drain before."""
        self._taken.wait(_ROOM_SLICE)

    def add(self, run: Accepted) -> bool:
        """Append one run as it is; True when the caller must tell the actor to drain."""
        self._runs.append(run)
        self._open.clear()
        self._count += len(run[0])
        self.full = self._count >= MAX_QUEUED and not self.sealed
        if self._armed:
            return False
        self._armed = True
        return True

    def reopen(self, ordering: bool) -> None:
        """Apply the ordering switch: later publishes start new runs."""
        self.ordering = ordering
        self._open.clear()

    def take(self) -> list[Accepted]:
        """Every run added so far, in order."""
        runs, self._runs = self._runs, []
        self._open.clear()
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
