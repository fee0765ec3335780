"""The Publisher actor: accumulates messages into batches and sends them to the topic.

All batching and ordering state lives in this actor and changes only in its thread.
Callers (the `Publisher` handle) reach it through its mailbox:

- `Drain` (once per burst of publishes: see `Intake`) adds them to their lanes' batches;
- `SendNow` closes every open batch (a publish about to block in flow control) unless
  the batches in flight hold more messages (see `_relieve`);
- `Flush` does the same and answers once every batch closed so far has settled;
- `Tick` comes from the `Ticker`, the Publisher's one scheduler (a thread), at the
  earliest batch deadline;
- the topic's future of a run of batches sent together comes back itself (its done
  callback is the actor's ``tell``), with an outcome per batch;
- `SetOptions` and `Resume` are asks.

Every message's capacity is released, and its future resolved, exactly once, in
`_settle`: on confirmation, failure, a paused key or a stop. Each batch of a run is
confirmed or failed on its own outcome. Each future is the one its ``publish``
returned, never handed to another message.

The module also holds what the actor is reached through: its mailbox messages (all
immutable), the topic seam it publishes through (`BatchTopic`) and its `Ticker`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from actors import Actor
from runtime.core._topic_actor import Parts
from runtime.errors import OrderingKeyPausedError, PublishError
from runtime.publisher._batching import Batch, Batcher, BatchSettings
from runtime.publisher._flow_control import FlowGate
from runtime.publisher._flush import FlushBarriers
from runtime.publisher._intake import Accepted, Intake, fail_slice, resolve_slice
from runtime.publisher._sequencer import KeySequencer

__all__ = [
    "RUN", "SEND_WINDOW", "BatchTopic", "Drain", "Flush", "Outcome", "PublisherActor", "Resume",
    "SendNow", "SetOptions", "Tick", "Ticker",
]

log = logging.getLogger(__name__)

# Unkeyed batches in flight to the topic at once. Beyond it, closed batches wait here;
# without a window a fast publisher parks its whole backlog in the topic's mailbox.
SEND_WINDOW = 32
# Batches sent to a local topic in one mailbox message at most; the topic reports each
# batch's outcome on its own, so a run saves mail, never merges fates.
RUN = 16


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


# Upper bound of one wait, so a ticker with an injected clock keeps re-reading it.
_MAX_WAIT = 0.25


class Ticker:
    """A thread that calls ``tick`` once the clock reaches the earliest scheduled deadline.

    Args:
        tick: called from the ticker's thread, without locks held; must not block.
        clock: the time source deadlines are read against.
        name: the thread's name.
    """

    def __init__(
        self,
        tick: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str = "publisher-ticker",
    ) -> None:
        self._tick = tick
        self._clock = clock
        self._condition = threading.Condition(threading.Lock())
        self._deadline: float | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def schedule(self, deadline: float) -> None:
        """Ask for a tick at ``deadline`` (a clock reading); the earliest request wins."""
        with self._condition:
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
                self._condition.notify()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for it to end."""
        with self._condition:
            self._stopped = True
            self._condition.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        """Until stopped: wait for the deadline to pass, consume it, call ``tick``."""
        condition = self._condition
        while True:
            with condition:
                while True:
                    if self._stopped:
                        return
                    if self._deadline is None:
                        condition.wait(_MAX_WAIT)
                        continue
                    remaining = self._deadline - self._clock()
                    if remaining <= 0:
                        self._deadline = None
                        break
                    condition.wait(min(remaining, _MAX_WAIT))
            try:
                self._tick()
            except Exception:
                log.exception("publisher tick failed")


class PublisherActor(Actor):
    """Batches messages per lane, sends them to ``topic``, settles their futures.

    Args:
        topic: anything with ``name`` and ``_publish_batches`` (`BatchTopic`).
        gate: the flow-control gate shared with the handle; released here.
        intake: where the handle leaves admitted messages for `Drain`.
        batching: the initial thresholds.
        message_ordering: whether ordering keys get their own lanes.
        on_paused: called (in this thread) with the paused keys whenever they change.
        clock: the time source for batch latency.
    """

    def __init__(
        self,
        *,
        topic: BatchTopic,
        gate: FlowGate,
        intake: Intake,
        batching: BatchSettings,
        message_ordering: bool,
        on_paused: Callable[[frozenset[str]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._topic = topic
        self._gate = gate
        self._intake = intake
        self._ordering = message_ordering
        self._on_paused = on_paused
        self._clock = clock
        self._batcher = Batcher(batching, clock=clock)
        self._sequencer = KeySequencer()
        self._outstanding: dict[int, Batch] = {}  # closed, not yet settled
        self._in_flight = 0  # messages of the batches sent and not yet settled
        # Runs sent, by the topic's future of their outcomes: the future comes back as mail.
        self._runs: dict[Future[list[Outcome]], list[Batch]] = {}
        self._outbox: list[Batch] = []  # ready: sent when the current mail is handled
        self._held: deque[Batch] = deque()  # unkeyed batches waiting for the send window
        self._unkeyed_in_flight = 0
        self._barriers = FlushBarriers()
        self._tick_at: float | None = None
        self._ticker: Ticker | None = None
        self._tell: Callable[[Any], None] = lambda message: None  # the own ref's, once started

    def on_start(self) -> None:
        ref = self.ref
        self._tell = ref.tell
        self._ticker = Ticker(partial(ref.tell, _TICK), clock=self._clock,
                              name=f"{ref.name}-ticker")
        self._ticker.start()

    def on_stop(self) -> None:
        self._abandon(PublishError("Publisher is closed", 9), final=True)

    def on_failure(self, *_: object) -> None:
        self._abandon(PublishError("Publisher failed internally", 13), final=False)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Drain):
            self._drain()
        elif isinstance(message, Future):
            self._run_done(message)
        elif isinstance(message, Tick):
            self._tick_at = None
            for batch in self._batcher.due():
                self._close(batch)
            self._arm()
        elif isinstance(message, SendNow):
            self._relieve()
        elif isinstance(message, Flush):
            self._close_all()
            self._barriers.add(message.done, last_id=self._batcher.last_id,
                               outstanding=len(self._outstanding))
        elif isinstance(message, SetOptions):
            self._set_options(message)
        elif isinstance(message, Resume):
            if self._sequencer.resume(message.key):
                self._on_paused(self._sequencer.paused)
        else:
            raise TypeError(f"unexpected message for a Publisher: {message!r}")
        if not self._outbox:
            return None
        # Send the batches made ready by this mail: the Publisher's one call into the
        # topic. The topic takes runs of up to `RUN` batches (`_publish_batches`: one call
        # and one future each); the future comes back to this actor as mail once done.
        batches, self._outbox = self._outbox, []
        for start in range(0, len(batches), RUN):
            run = batches[start:start + RUN]
            parts = []
            for batch in run:
                parts.append((batch.datas, batch.attributes, batch.keys))
                self._in_flight += len(batch.datas)
            try:
                outcomes = self._topic._publish_batches(parts)
            except Exception as exc:  # a topic should answer with the failure; tolerate a raise
                outcomes = Future()
                outcomes.set_result([(None, exc)] * len(run))
            self._runs[outcomes] = run
            outcomes.add_done_callback(self._tell)
        return None

    # Batching.

    def _drain(self, ordering: bool | None = None) -> None:
        """Add what the intake holds to the open batches of its lanes, in publish order
        per lane; a paused key's messages fail here. With ``ordering``, the intake gathers
        later publishes by that switch (taken and switched in one hold of the lock)."""
        with self._gate.lock:
            runs = self._intake.take()
            if ordering is not None:
                self._intake.reopen(ordering)
        if not runs:
            return
        if not self._ordering:
            lanes: dict[str | None, list[Accepted]] = {None: runs}
        else:
            lanes = {}
            for run in runs:
                lanes.setdefault(run[2], []).append(run)
        for key, lane in lanes.items():
            if key is not None and self._sequencer.is_paused(key):
                self._refuse(key, lane)
                continue
            for batch in self._batcher.add(key, lane):
                self._close(batch)
        if self._tick_at is None:
            self._arm()

    def _refuse(self, key: str, lane: list[Accepted]) -> None:
        """Fail a paused key's messages and release their capacity."""
        _fail_runs(self._gate, lane, OrderingKeyPausedError(key))

    def _arm(self) -> None:
        """Ask the ticker for the earliest open batch's deadline, if it is earlier."""
        deadline = self._batcher.next_deadline()
        if deadline is not None and (self._tick_at is None or deadline < self._tick_at):
            self._tick_at = deadline
            if self._ticker is not None:
                self._ticker.schedule(deadline)

    def _relieve(self) -> None:
        """A publish waits for capacity: send the open batches unless those in flight hold
        more (their confirmations free it sooner, and open batches keep filling instead of
        leaving in slivers). Each confirmation while one waits checks again."""
        if self._in_flight <= self._batcher.open_messages():
            self._close_all()

    def _close_all(self) -> None:
        for batch in self._batcher.drain():
            self._close(batch)

    def _close(self, batch: Batch) -> None:
        """A batch is complete: track it and send it unless its key has one in flight,
        or (unkeyed) `SEND_WINDOW` batches are in flight already."""
        self._outstanding[batch.id] = batch
        ready = batch if batch.key is None else self._sequencer.submit(batch)
        if ready is None:
            return
        if ready.key is None:
            if self._unkeyed_in_flight >= SEND_WINDOW:
                self._held.append(ready)
                return
            self._unkeyed_in_flight += 1
        self._outbox.append(ready)

    def _set_options(self, options: SetOptions) -> None:
        # What the intake gathered under the old switch is batched under it.
        self._drain(options.message_ordering)
        self._ordering = options.message_ordering
        for batch in self._batcher.update(options.batching):
            self._close(batch)
        self._arm()

    # Sending.

    def _run_done(self, outcomes: Future[list[Outcome]]) -> None:
        """A run's outcomes came back: settle each of its batches on its own outcome and
        send what each held back (the next batch of its key, a held unkeyed batch)."""
        run = self._runs.pop(outcomes, None)
        if run is None:  # abandoned meanwhile (a failed actor's restart)
            return
        try:
            results = outcomes.result()
        except BaseException as exc:  # a topic should not fail the future: fail the run
            results = [(None, exc)] * len(run)
        for batch, (ids, error) in zip(run, results, strict=True):
            if error is None and (ids is None or len(ids) != len(batch.datas)):
                count = "no" if ids is None else len(ids)
                ids, error = None, PublishError(
                    f"topic returned {count} ids for {len(batch.datas)} messages", 13)
            self._in_flight -= len(batch.datas)
            self._settle(batch, ids, error)
            key = batch.key
            if key is None:
                self._unkeyed_in_flight -= 1
                if self._held:
                    self._close(self._held.popleft())
            elif error is None:
                following = self._sequencer.complete(key)
                if following is not None:
                    self._outbox.append(following)
            else:
                self._pause(key)
        if self._gate.congested:
            self._relieve()

    # Settling.

    def _pause(self, key: str) -> None:
        """Fail everything waiting on ``key`` and refuse it until resumed."""
        waiting = self._sequencer.pause(key)
        still_open = self._batcher.take(key)
        if still_open is not None:
            waiting.append(still_open)
        for batch in waiting:
            self._settle(batch, None, OrderingKeyPausedError(key))
        self._on_paused(self._sequencer.paused)

    def _settle(
        self, batch: Batch, ids: Sequence[str] | None, error: BaseException | None,
    ) -> None:
        """Resolve every future of ``batch`` and release its capacity: once per batch.

        With both ``ids`` and ``error`` the topic accepted only the first ``len(ids)``
        messages: those futures resolve, the rest (never published) fail.
        """
        confirmed = 0 if ids is None else len(ids)
        start = 0
        for sink, first, count in batch.slices:
            if start + count <= confirmed:
                resolve_slice(sink, first, ids[start:start + count])  # type: ignore[index]
            elif start < confirmed:  # cut by the partial confirmation
                resolve_slice(sink, first, ids[start:confirmed])  # type: ignore[index]
                fail_slice(sink, first + confirmed - start, start + count - confirmed,
                           _given(error))
            else:
                fail_slice(sink, first, count, _given(error))
            start += count
        self._gate.release(len(batch.datas), batch.size)
        if self._outstanding.pop(batch.id, None) is not None and self._barriers.waiting:
            self._barriers.settled(batch.id)

    def _abandon(self, error: PublishError, *, final: bool) -> None:
        """Stop the ticker; fail and release everything not yet settled; wake flushes.

        ``final`` (the last stop) seals the intake: later publishes are refused.
        """
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        with self._gate.lock:
            runs = self._intake.seal() if final else self._intake.take()
        _fail_runs(self._gate, runs, error)  # admitted, never batched
        self._sequencer.drain()
        self._runs.clear()
        self._in_flight = 0
        self._unkeyed_in_flight = 0
        self._held.clear()  # still in _outstanding: settled below
        self._outbox.clear()
        for batch in [*self._batcher.drain(), *self._outstanding.values()]:
            self._settle(batch, None, error)
        self._barriers.release_all()


def _fail_runs(gate: FlowGate, runs: list[Accepted], error: BaseException) -> None:
    """Fail runs never batched and release their capacity."""
    for _, _, _, sink, first, sizes in runs:
        fail_slice(sink, first, len(sizes), error)
    gate.release(sum(len(run[5]) for run in runs), sum(sum(run[5]) for run in runs))


def _given(error: BaseException | None) -> BaseException:
    assert error is not None  # messages go unconfirmed only with a failure
    return error


_TICK = Tick()
