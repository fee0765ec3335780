"""The Publisher handle: validates and admits messages, then hands them to its actor.

``publish`` and ``publish_many`` run in the caller's thread and do only what must happen
there: validation (raised synchronously, nothing enqueued), then for each message
flow-control admission and one append to the `Intake` under the gate's lock (a tell to
the `PublisherActor` only when it is not already due to drain). A message that would
wait (flow control, a full intake) is admitted by the waiting path, `_submit`, which
``publish_many`` always takes. Batching, ordering and settlement happen in the actor;
see `runtime.publisher._actor`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any
from weakref import ref

from actors import ActorSystem
from runtime.core._message import NO_ATTRIBUTES, Message
from runtime.errors import OrderingKeyPausedError, PublishError, WouldBlock
from runtime.publisher._actor import BatchTopic, Drain, Flush, PublisherActor, Resume, SendNow, SetOptions
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl, FlowGate
from runtime.publisher._flush import wait_flushed
from runtime.publisher._intake import (
    MAX_QUEUED,
    Accepted,
    Bulk,
    Intake,
    PublishFuture,
    Sink,
    fail_slice,
)
from runtime.publisher._validation import (
    MAX_MESSAGE_SIZE,
    as_bytes,
    check_ordering,
    checked_attributes,
    checked_key,
    checked_timeout,
    checked_topic,
    closed_error,
    merge,
)

__all__ = ["Publisher"]

# Bound of every internal ask and of each slice of an unbounded wait.
_ASK_TIMEOUT = 10.0
SEND_NOW = SendNow()
DRAIN = Drain()
_BYTES = frozenset({bytes})


class Publisher:
    """Publishes bytes messages to a topic in batches, with flow control (an actor).

    Build one with ``topic.publisher(...)``. ``publish`` returns a new future of the
    message id at once (unless flow control blocks it), ``publish_many`` one future of
    the ids of many messages; the actor sends batches when a threshold of ``batching``
    is reached, and resolves each future when the topic confirms its messages.

    Args:
        topic: the target; anything with ``name`` and ``_publish_batches(parts)``
            (`BatchTopic`: a local, Redis or remote topic).
        batching: the batch thresholds (default `BatchSettings()`).
        flow_control: the outstanding limits (default: unlimited).
        message_ordering: give each ordering key its own lane: one batch in flight per
            key, in publish order, paused after a failure.
        system: the `ActorSystem` the Publisher's actor runs in.
        clock: the time source for batch latency and ``block_timeout``.
        name: the actor's name (default: chosen by the system).

    Raises:
        PublishError: code 3 when a setting is invalid.
        InvalidSettingsError: the topic's ``message_type`` accepts no `Message`.
    """

    def __init__(
        self,
        topic: BatchTopic,
        *,
        batching: BatchSettings | None = None,
        flow_control: FlowControl | None = None,
        message_ordering: bool = False,
        system: ActorSystem,
        clock: Callable[[], float] = time.monotonic,
        name: str | None = None,
    ) -> None:
        checked_topic(topic)
        self._batching = merge(BatchSettings, BatchSettings(), batching, "batching")
        self._flow_control = merge(FlowControl, FlowControl(), flow_control, "flow_control")
        self._message_ordering = check_ordering(message_ordering)
        self._topic = topic
        self._gate = FlowGate(self._flow_control, clock=clock)
        self._intake = Intake(self._gate, ordering=self._message_ordering)
        self._paused: frozenset[str] = frozenset()
        self._closed = False
        self._options_lock = threading.Lock()
        self._ref = system.spawn(
            PublisherActor, name=name, topic=topic, gate=self._gate, intake=self._intake,
            batching=self._batching, message_ordering=self._message_ordering,
            on_paused=self._set_paused, clock=clock,
        )
        self._tell = self._ref.tell

    @property
    def topic(self) -> BatchTopic:
        """The topic this Publisher publishes to."""
        return self._topic

    @property
    def batching(self) -> BatchSettings:
        """The batch thresholds in force."""
        return self._batching

    @property
    def flow_control(self) -> FlowControl:
        """The flow-control limits in force."""
        return self._flow_control

    @property
    def message_ordering(self) -> bool:
        """Whether ordering keys get their own in-order lanes."""
        return self._message_ordering

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    @property
    def outstanding(self) -> tuple[int, int]:
        """The (messages, bytes) accepted and not yet confirmed or failed."""
        return self._gate.outstanding

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        attributes: Mapping[str, str] | None = None,
        ordering_key: str | None = None,
    ) -> Future[str]:
        """Publish ``data`` with string ``attributes``; return a future of its message id.

        Blocks only under flow control ``"block"`` (at most ``block_timeout``). The future
        fails with the topic's error when the batch fails, or with
        `OrderingKeyPausedError` when its key was paused meanwhile.

        Raises:
            PublishError: code 3 for invalid data, attributes, key or size; code 9 when
                the Publisher is closed.
            OrderingKeyPausedError: code 9, the key is paused.
            FlowControlError: code 8, flow-control limits exceeded.
        """
        future = PublishFuture()  # new: never one handed out before
        if data.__class__ is not bytes:
            data = as_bytes(data)
        size = len(data)
        if attributes:
            checked, size = checked_attributes(attributes, size)
        else:
            checked = NO_ATTRIBUTES
        key = None if ordering_key is None else checked_key(ordering_key)
        if size > MAX_MESSAGE_SIZE:
            raise PublishError("Message size exceeds maximum of 10MB", 3)
        if key is not None and key in self._paused:
            raise OrderingKeyPausedError(key)
        try:
            if self._intake.put(data, checked, key, future, size):
                self._tell(DRAIN)
        except WouldBlock:
            self._submit(([data], checked, key, [ref(future)], 0, [size]))
        return future

    def publish_message(self, message: Message) -> Future[str]:
        """Publish a prepared `Message` (its id and publish time are assigned anew).

        Blocks and raises like `publish`.
        """
        if not isinstance(message, Message):
            raise PublishError("publish_message takes a Message", 3)
        # Checked and copied as any publish: the caller's attributes dict may change.
        return self.publish(message.data, message.attributes, message.ordering_key)

    def publish_many(
        self,
        datas: Iterable[bytes | bytearray | memoryview],
        *,
        attributes: Mapping[str, str] | None = None,
        ordering_key: str | None = None,
    ) -> Future[list[str]]:
        """Publish each of ``datas``, in order, with the same ``attributes`` and
        ``ordering_key``; return one future of all their ids, in order.

        The bulk twin of `publish`: the messages are validated as `publish` validates one
        (every one before any is admitted), then admitted one by one under flow control,
        and batched like any others. The future resolves with the list of ids once every
        message is confirmed, or fails with the first failure of one of them (messages
        of other batches may still be published; their ids are not reported).

        Blocks and raises like `publish`. A flow-control refusal raises only when it
        refuses the first message; past it, the future fails with the refusal, and the
        messages from the refused one on are not published.

        Raises:
            PublishError: code 3 for invalid data, attributes, key or size (nothing is
                published); code 9 when the Publisher is closed.
            OrderingKeyPausedError: code 9, the key is paused.
            FlowControlError: code 8, the first message exceeds the limits.
        """
        datas = list(datas)
        bulk = Bulk(len(datas))
        if datas:
            self._submit(self._accepted(datas, attributes, ordering_key, bulk))
        return bulk.future

    def flush(self, timeout: float | None = None) -> None:
        """Send every pending batch; wait until everything accepted before the call settled.

        Returns at once when nothing is outstanding. Never raises for per-message
        failures (they are in the futures).

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
            ValueError: ``timeout`` is not None or a finite number >= 0.
        """
        timeout = checked_timeout(timeout)
        if self.outstanding[0] == 0:
            return
        done: Future[None] = Future()
        self._ref.tell(Flush(done=done))
        wait_flushed(done, timeout, self._ref.is_alive)

    def close(self, timeout: float | None = None) -> None:
        """Refuse new publishes, wake blocked ones, flush, then stop the actor.

        Publishes after (and blocked during) the call raise `PublishError` code 9
        "Publisher is closed"; one that was already under way when close() began may
        instead return a future, which is confirmed or fails with that error. What is
        still unsettled when ``timeout`` passes fails with that error. A second close is
        a no-op.

        Raises:
            TimeoutError: the flush did not finish within ``timeout`` seconds.
            ValueError: ``timeout`` is not None or a finite number >= 0 (the
                Publisher stays open).
        """
        timeout = checked_timeout(timeout)
        if not self._refuse():
            return
        try:
            self.flush(timeout)
        finally:
            self._ref.stop(timeout=_ASK_TIMEOUT)

    def _refuse(self) -> bool:
        """Close's first step: refuse new publishes and wake blocked ones (code 9).

        Returns False when the Publisher was closed already.
        """
        with self._options_lock:
            if self._closed:
                return False
            self._closed = True
        self._gate.close(closed_error)
        return True

    def set_options(
        self,
        *,
        batching: BatchSettings | Mapping[str, Any] | None = None,
        flow_control: FlowControl | Mapping[str, Any] | None = None,
        message_ordering: bool | None = None,
    ) -> None:
        """Change settings; omitted parts keep their value, a mapping merges field-wise.

        Open batches that now reach a threshold go out; flow-control waiters that now
        fit are admitted. Blocks for one round trip to the actor.

        Raises:
            PublishError: code 3 for an invalid value (nothing changes); code 9 when closed.
        """
        with self._options_lock:
            new_batching = merge(BatchSettings, self._batching, batching, "batching")
            new_flow = merge(FlowControl, self._flow_control, flow_control, "flow_control")
            ordering = self._message_ordering
            if message_ordering is not None:
                ordering = check_ordering(message_ordering)
            if self._closed:
                raise closed_error()
            options = SetOptions(batching=new_batching, message_ordering=ordering)
            self._ref.ask(options, timeout=_ASK_TIMEOUT).result()
            self._gate.update(new_flow)
            self._batching, self._flow_control = new_batching, new_flow
            self._message_ordering = ordering

    def resume_publish(self, ordering_key: str) -> None:
        """Accept publishes on a paused ordering key again; a no-op for other keys."""
        if not ordering_key or self._closed:
            return
        self._ref.ask(Resume(key=ordering_key), timeout=_ASK_TIMEOUT).result()

    def paused_keys(self) -> list[str]:
        """The ordering keys paused after a failure, sorted."""
        return sorted(self._paused)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Publisher topic={self._topic.name!r} {state}>"

    def _set_paused(self, keys: frozenset[str]) -> None:
        self._paused = keys

    def _accepted(
        self, datas: Sequence[bytes | bytearray | memoryview], attributes: Mapping[str, str] | None,
        key: str | None, sink: Sink,
    ) -> Accepted:
        """Messages as the Publisher keeps them: data and key checked, attributes copied
        once for all, each message's size, and where their ids go.

        Raises:
            PublishError: code 3 for invalid data, attributes, key or size.
            OrderingKeyPausedError: the key is paused.
        """
        if set(map(type, datas)) == _BYTES:
            checked_datas: list[bytes] = list(datas)  # type: ignore[arg-type]
        else:
            checked_datas = list(map(as_bytes, datas))
        if attributes:
            checked, extra = checked_attributes(attributes, 0)
        else:
            checked, extra = NO_ATTRIBUTES, 0
        if key is not None:
            key = checked_key(key)
        sizes = list(map(len, checked_datas))
        if extra:
            sizes = [size + extra for size in sizes]
        if max(sizes) > MAX_MESSAGE_SIZE:
            raise PublishError("Message size exceeds maximum of 10MB", 3)
        if key is not None and key in self._paused:
            raise OrderingKeyPausedError(key)
        return checked_datas, checked, key, sink, 0, sizes

    def _submit(self, run: Accepted) -> None:
        """Admit each message of ``run`` under flow control and hand them to the actor,
        in order.

        As many as fit are admitted under one hold of the gate's lock and appended as
        one run of at most `MAX_QUEUED` (waiting meanwhile while the intake is
        `Intake.full`); one that does not fit waits in `FlowGate.acquire` (after the
        actor was told to send what it holds, so a lone publisher always progresses).
        The actor is told to drain under the lock.

        Raises:
            FlowControlError, PublishError: admission of the first message failed (code
                8, or code 9 once closed). For a later message the error fails it and
                every one after it instead: the earlier ones are already on their way.
        """
        gate, intake = self._gate, self._intake
        datas, attributes, key, sink, _, sizes = run
        done, count = 0, len(sizes)
        while done < count:
            try:
                with gate.lock:
                    while intake.full and not gate.closed:  # an attribute: see Intake
                        intake.wait_for_room()
                    end = min(count, done + MAX_QUEUED)
                    admitted = gate.admit_now(sizes, done, end)
                    if admitted > done:
                        if intake.sealed:  # the actor stopped for good
                            gate.release_locked(admitted - done, sum(sizes[done:admitted]))
                            raise closed_error()
                        part = run if admitted - done == count else (
                            datas[done:admitted], attributes, key, sink, done,
                            sizes[done:admitted])
                        if intake.add(part):
                            self._tell(DRAIN)
                        done = admitted
                if done < count and admitted < end:  # the next one did not fit: wait
                    self._wait_admitted((datas[done:done + 1], attributes, key, sink, done,
                                         sizes[done:done + 1]))
                    done += 1
            except BaseException as exc:
                if done == 0:
                    raise
                fail_slice(sink, done, count - done, exc)
                return

    def _wait_admitted(self, run: Accepted) -> None:
        """Admission of a run of one once `FlowGate.admit_now` refused it: acquire (may
        block), enqueue."""
        gate, size = self._gate, run[5][0]
        waited = gate.acquire(size, on_block=lambda: self._tell(SEND_NOW))
        with gate.lock:
            if gate.closed or self._intake.sealed:
                gate.release_locked(1, size)
                raise closed_error()
            if self._intake.add(run):
                self._tell(DRAIN)
        if waited and gate.congested:
            # Others still wait for capacity: this message must not sit out the
            # latency in an open batch while they do.
            self._tell(SEND_NOW)
