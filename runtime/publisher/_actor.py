"""The Publisher actor: accumulates messages into batches and sends them to the topic.

All batching and ordering state lives in this actor and changes only in its thread.
Callers (the `Publisher` handle) reach it through its mailbox:

- `Drain` (once per burst of publishes: see `Intake`) adds them to their lanes' batches;
- `SendNow` closes every open batch (a publish about to block in flow control) unless
  the batches in flight hold more messages (see `_relieve`);
- `Flush` does the same and answers once every batch closed so far has settled;
- `Tick` comes from the ticker at the earliest batch deadline;
- `RunDone` comes back from a local topic, once per run of batches sent together
  (`SendRun`), and `BatchDone` from any other topic's future, once per batch;
- `SetOptions` and `Resume` are asks.

Every message's capacity is released, and its future resolved, exactly once, in
`_settle`: on confirmation, failure, a paused key or a stop. Each future is the one its
``publish`` returned, held until then and never handed to another message.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from actors import Actor, Ref
from runtime.errors import OrderingKeyPausedError, PublishError
from runtime.publisher._batching import Batch, Batcher, BatchSettings, fail_all, resolve_all
from runtime.publisher._flow_control import FlowGate
from runtime.publisher._flush import FlushBarriers
from runtime.publisher._intake import Columns, Intake, uncounted
from runtime.publisher._lanes import Lanes
from runtime.publisher._messages import (
    BatchDone,
    BatchTopic,
    Drain,
    Flush,
    Resume,
    RunDone,
    SendNow,
    SendRun,
    SetOptions,
    Tick,
    checked,
)
from runtime.publisher._sequencer import KeySequencer
from runtime.publisher._ticker import Ticker

__all__ = ["RUN", "SEND_WINDOW", "PublisherActor"]

# Unkeyed batches in flight to the topic at once. Beyond it, closed batches wait here as
# parts; without a window a fast publisher parks its whole backlog in the topic's mailbox
# as Message objects, which the garbage collector rescans on every full collection.
SEND_WINDOW = 32
# Batches sent to a local topic in one mailbox message at most (the topic merges up to
# 16 consecutive small batches into one fan-out anyway).
RUN = 16


class PublisherActor(Actor):
    """Batches messages per lane, sends them to ``topic``, settles their futures.

    Args:
        topic: anything with ``name`` and ``_publish_batch``.
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
        self._publish_parts = getattr(topic, "_publish_parts", None)
        self._publish_run = getattr(topic, "_publish_run", None)
        # Sent: the topic's future, or the run the batch went in.
        self._in_flight: dict[int, Future[Sequence[str]] | SendRun] = {}
        self._outbox: list[Batch] = []  # ready: sent when the current mail is handled
        self._held: deque[Batch] = deque()  # unkeyed batches waiting for the send window
        self._unkeyed_in_flight = 0
        self._gate = gate
        self._intake = intake
        self._ordering = message_ordering
        self._on_paused = on_paused
        self._clock = clock
        self._batcher = Batcher(batching, clock=clock)
        self._sequencer = KeySequencer()
        self._lanes = Lanes(self._batcher, self._sequencer, gate)
        self._outstanding: dict[int, Batch] = {}  # closed, not yet settled
        self._releasing: list[int] | None = None  # a run's (messages, bytes), released at its end
        self._barriers = FlushBarriers()
        self._tick_at: float | None = None
        self._ticker: Ticker | None = None
        self._self_ref: Ref | None = None

    def on_start(self) -> None:
        self._self_ref = ref = self.ref
        self._ticker = Ticker(lambda: ref.tell(_TICK), clock=self._clock,
                              name=f"{ref.name}-ticker")
        self._ticker.start()

    def on_stop(self) -> None:
        self._abandon(PublishError("Publisher is closed", 9), final=True)

    def on_failure(self, *_: object) -> None:
        self._abandon(PublishError("Publisher failed internally", 13), final=False)

    def on_receive(self, message: Any) -> Any:
        if message.__class__ is Drain:
            self._drain()
        elif message.__class__ is RunDone:
            self._run_done(message)
        elif message.__class__ is BatchDone:
            self._batch_done(message)
        elif message.__class__ is Tick:
            self._tick()
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
        if self._outbox:
            self._send_outbox()
        return None

    def _drain(self) -> None:
        datas, attributes, keys, futures, sizes, _ = self._take(seal=False)
        if not futures:
            return
        for batch in self._lanes.add(datas, attributes, keys, futures, sizes,
                                     ordering=self._ordering):
            self._close(batch)
        if self._tick_at is None:
            self._arm()

    def _take(self, *, seal: bool) -> Columns:
        """The intake's messages, each counted by the gate from here on (`_settle` and
        `_abandon` release them)."""
        gate, intake = self._gate, self._intake
        with gate.lock:
            columns = intake.seal() if seal else intake.take()
            if columns[3]:
                gate.count_in(*uncounted(columns[4], columns[5]))
        return columns

    def _arm(self) -> None:
        """Ask the ticker for the earliest open batch's deadline, if it is earlier."""
        deadline = self._batcher.next_deadline()
        if deadline is not None and (self._tick_at is None or deadline < self._tick_at):
            self._tick_at = deadline
            if self._ticker is not None:
                self._ticker.schedule(deadline)

    def _tick(self) -> None:
        self._tick_at = None
        for batch in self._batcher.due():
            self._close(batch)
        self._arm()

    def _relieve(self) -> None:
        """A publish waits for capacity: send the open batches unless those in flight hold
        more (their confirmations free it sooner, and open batches keep filling instead of
        leaving in slivers). Each confirmation while one waits checks again."""
        in_flight = sum(len(self._outstanding[batch_id]) for batch_id in self._in_flight)
        if in_flight <= self._batcher.open_messages():
            self._close_all()

    def _close_all(self) -> None:
        for batch in self._batcher.drain():
            self._close(batch)

    def _close(self, batch: Batch) -> None:
        """A batch is complete: track it and send it unless its key has one in flight,
        or (unkeyed) `SEND_WINDOW` batches are in flight already."""
        self._outstanding[batch.id] = batch
        ready = self._sequencer.submit(batch)
        if ready is None:
            return
        if ready.key is None and self._unkeyed_in_flight >= SEND_WINDOW:
            self._held.append(ready)  # kept as parts: a backlog costs the GC little here
            return
        self._send(ready)

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
        futures = batch.futures
        if ids is not None:
            resolve_all(futures if error is None else futures[:len(ids)], ids)
        if error is not None:
            fail_all(futures if ids is None else futures[len(ids):], error)
        held = self._releasing
        if held is None:
            self._gate.release(len(batch), batch.size)
        else:
            held[0] += len(batch)
            held[1] += batch.size
        if self._outstanding.pop(batch.id, None) is not None and self._barriers:
            self._barriers.settled(batch.id)

    def _set_options(self, options: SetOptions) -> None:
        self._ordering = options.message_ordering
        for batch in self._batcher.update(options.batching):
            self._close(batch)
        self._arm()

    def _abandon(self, error: PublishError, *, final: bool) -> None:
        """Stop the ticker; fail and release everything not yet settled; wake flushes.

        ``final`` (the last stop) seals the intake (whoever appends later fails it).
        """
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        _, _, _, futures, sizes, _ = self._take(seal=final)
        fail_all(futures, error)  # admitted but never batched: they fail too
        self._gate.release(len(sizes), sum(sizes))
        self._sequencer.drain()
        self._in_flight.clear()
        self._held.clear()  # still in _outstanding: settled below
        self._outbox.clear()
        for batch in [*self._batcher.drain(), *self._outstanding.values()]:
            self._settle(batch, None, error)
        self._barriers.release_all()


    def _send(self, batch: Batch) -> None:
        """Count ``batch`` as in flight; it leaves with the others made ready by the
        same mail (`_send_outbox`)."""
        if batch.key is None:
            self._unkeyed_in_flight += 1
        self._outbox.append(batch)

    def _send_outbox(self) -> None:
        """Send the ready batches: to a local topic in runs of up to `RUN` batches, one
        mailbox message and one reply each; else one by one."""
        batches, self._outbox = self._outbox, []
        if self._publish_run is None:
            for batch in batches:
                self._send_alone(batch)
            return
        for start in range(0, len(batches), RUN):
            run = batches[start:start + RUN]
            self._send_run(SendRun([batch.id for batch in run]), run)

    def _send_run(self, run: SendRun, batches: list[Batch]) -> None:
        ref, publish_run = self._self_ref, self._publish_run
        assert ref is not None
        assert publish_run is not None
        for batch_id in run.batch_ids:
            self._in_flight[batch_id] = run
        parts = [(batch.datas, batch.attributes, batch.keys) for batch in batches]
        try:
            publish_run(parts, lambda outcomes: ref.tell(RunDone(run=run, outcomes=outcomes)))
        except Exception as exc:  # a topic should reply with the failure; tolerate a raise
            ref.tell(RunDone(run=run, outcomes=[(None, exc)] * len(parts)))

    def _send_alone(self, batch: Batch) -> None:
        try:
            if self._publish_parts is not None:
                result = self._publish_parts(batch.datas, batch.attributes, batch.keys)
            else:
                result = self._topic._publish_batch(batch.messages)
        except Exception as exc:  # a topic should fail the future; tolerate a raise
            result = Future()
            result.set_exception(exc)
        ref = self._self_ref
        assert ref is not None
        batch_id = batch.id
        self._in_flight[batch_id] = result
        result.add_done_callback(lambda done: ref.tell(BatchDone(batch_id=batch_id, result=done)))

    def _batch_done(self, done: BatchDone) -> None:
        # Identity check: a reply meant for an earlier incarnation (ids restart) is ignored.
        if self._in_flight.get(done.batch_id) is not done.result:
            return
        self._finish(done.batch_id, *done.outcome(len(self._outstanding[done.batch_id])))

    def _run_done(self, done: RunDone) -> None:
        """Finish a run's batches; their flow control is released once, at the end (16
        releases, each taking the gate's lock and waking a waiting publisher, cost the
        Publisher thread ~40 µs per `FlowControl(1000)` window of 16 keys)."""
        self._releasing = held = [0, 0]
        try:
            for batch_id, (ids, error) in zip(done.run.batch_ids, done.outcomes, strict=True):
                if self._in_flight.get(batch_id) is done.run:  # as in `_batch_done`
                    self._finish(batch_id, *checked(ids, error, len(self._outstanding[batch_id])))
        finally:
            self._releasing = None
            if held[0] or held[1]:
                self._gate.release(*held)
        if self._gate.congested:
            self._relieve()

    def _finish(self, batch_id: int, ids: Sequence[str] | None, error: BaseException | None) -> None:
        """A sent batch is confirmed (``ids``) or failed: settle it, send what it held back."""
        del self._in_flight[batch_id]
        batch = self._outstanding[batch_id]
        self._settle(batch, ids, error)
        if self._releasing is None and self._gate.congested:  # else once the run is done
            self._relieve()
        key = batch.key
        if key is None:
            self._unkeyed_in_flight -= 1
            if self._held:
                self._send(self._held.popleft())
            return
        if error is None:
            following = self._sequencer.complete(key)
            if following is not None:
                self._send(following)
        else:
            self._pause(key)


_TICK = Tick()
