"""The Publisher actor's sending half: batches out to the topic, outcomes back in."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from actors import Ref
from runtime.publisher._batching import Batch
from runtime.publisher._flow_control import FlowGate
from runtime.publisher._messages import BatchDone, BatchTopic, RunDone, SendRun, checked
from runtime.publisher._sequencer import KeySequencer

__all__ = ["RUN", "SEND_WINDOW", "Sending"]

# Unkeyed batches in flight to the topic at once. Beyond it, closed batches wait here as
# parts; without a window a fast publisher parks its whole backlog in the topic's mailbox
# as Message objects, which the garbage collector rescans on every full collection.
SEND_WINDOW = 32
# Batches sent to a local topic in one mailbox message at most (the topic merges up to
# 16 consecutive small batches into one fan-out anyway).
RUN = 16


class Sending:
    """Sends ready batches and finishes them from the topic's replies (a mixin of
    `PublisherActor`, in its thread; it settles and pauses)."""

    _topic: BatchTopic
    _publish_parts: Callable[..., Future[Sequence[str]]] | None
    _publish_run: Callable[..., None] | None
    _self_ref: Ref | None
    _gate: FlowGate
    _sequencer: KeySequencer
    _outstanding: dict[int, Batch]
    _in_flight: dict[int, Future[Sequence[str]] | SendRun]
    _outbox: list[Batch]
    _held: deque[Batch]
    _unkeyed_in_flight: int
    # The actor's own: settle a batch (ids, error), relieve flow control, pause a key.
    _settle: Callable[[Batch, Sequence[str] | None, BaseException | None], None]
    _relieve: Callable[[], None]
    _pause: Callable[[str], None]
    _releasing: list[int] | None  # (messages, bytes) `_settle` holds back during a run

    def _init_sending(self, topic: BatchTopic) -> None:
        """The sending state, empty (from the actor's ``__init__``)."""
        self._topic = topic
        self._publish_parts = getattr(topic, "_publish_parts", None)
        self._publish_run = getattr(topic, "_publish_run", None)
        # Sent: the topic's future, or the run the batch went in.
        self._in_flight = {}
        self._outbox = []  # ready: sent when the current mail is handled
        self._held = deque()  # unkeyed batches waiting for the send window
        self._unkeyed_in_flight = 0

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
