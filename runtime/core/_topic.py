"""A topic: the publish entry point and the handle on its subscribers and books."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from actors import ActorSystem, Ref
from actors.errors import ActorError
from runtime.core._block import Block
from runtime.core._closing import close_publishers
from runtime.core._held import holder
from runtime.core._message import Message, parts_of
from runtime.core._outcome import PublishReport
from runtime.core._publishing import PublishPath
from runtime.core._replay import Replay
from runtime.core._settings import TopicSettings, check_timeout
from runtime.core._stats import TopicStats
from runtime.core._topic_actor import (
    Batch,
    BatchOutcome,
    PublishBatches,
    TopicActor,
    batch_ids,
)
from runtime.core.settlement._dead_letters import DeadLetter, DeadLetterQueue
from runtime.core.settlement._delivery import Delivery
from runtime.core.settlement._ledger import Ledger
from runtime.core.settlement._timer import Timer
from runtime.core.settlement._tracker import SWEEP, TICK, TrackerActor
from runtime.core.subscribers._member import Handler
from runtime.core.subscribers._ring import Ring
from runtime.core.subscribers._subscribers import Subscribers
from runtime.core.subscribers._subscription import PullSubscription, Subscription
from runtime.errors import InvalidSettingsError, TopicClosedError, WouldBlock

if TYPE_CHECKING:
    from runtime.publisher._publisher import Publisher

__all__ = ["Topic"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
# The time a close gives the topic's tracker and actors (`Bus.close`: all topics
# together). Longer lets a slow handler finish and settle "ok"; shorter bounds how long
# a stuck one holds the caller. Re-measure with tests/reliability/test_shutdown.py.
_STOP_TIMEOUT = 5.0
# Past the budget: the least wait for one more step (a tracker still making progress,
# an actor's stop), so a close that ran out of time still ends each step in order.
_MIN_SLICE = 0.05
# The least time a worker pool gets to stop: its processes exit before they are killed.
_POOL_FLOOR = 1.0
# The longest a handler's publish without a timeout waits when its topic has no
# ``ack_timeout`` (with one, that is the bound). Longer tolerates slower downstream
# stages; shorter reports a cycle sooner.
_HANDLER_WAIT = 30.0


class Topic(Generic[T]):
    """A named stream of messages with balanced groups and broadcast subscribers.

    Made by `Bus.create_topic`. Publishing runs in the caller's thread; the topic's
    tracker, groups and subscribers are actors in the bus's `ActorSystem`.
    """

    def __init__(
        self, name: str, settings: TopicSettings, *, system: ActorSystem, timer: Timer,
        resolve: Callable[[Any], Topic[Any]], clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep, prefix: str = "bus",
        handling: threading.local | None = None,
    ) -> None:
        self._name = name
        # Per thread of the bus: the topic whose handler it runs (`_handles`).
        self._handling = threading.local() if handling is None else handling
        self._settings = settings
        self._system = system
        self._clock = clock
        self._publishers: list[Publisher] = []
        self._resolve = resolve
        self._prefix = f"{prefix}/{name}"
        self._dead_letters = DeadLetterQueue(
            limit=settings.dead_letter_limit, replayer=self._replayer,
        )
        self._ledger = ledger = Ledger(
            topic=name, ack_timeout=settings.ack_timeout,
            max_attempts=settings.max_delivery_attempts,
            dead_letters=self._dead_letters, clock=clock,
        )
        self._ring = Ring(
            settings.broadcast_capacity, name, blocking=settings.broadcast_on_lag == "block",
        )
        self._tracker = tracker = system.spawn(TrackerActor, ledger, name=f"{self._prefix}/tracker")
        self._subscribers = Subscribers(
            topic=name, settings=settings, system=system, ledger=ledger, ring=self._ring,
            tracker=tracker, prefix=self._prefix, call_later=timer.call_later,
        )
        ledger.bind(
            schedule=lambda when: timer.schedule(when, lambda: tracker.tell(TICK)),
            redeliver=self._subscribers.redeliver,
        )
        self._path = PublishPath(
            topic=name, settings=settings, ledger=ledger, ring=self._ring,
            subscribers=self._subscribers, sleep=sleep,
        )
        self._replay = Replay(
            topic=name, ledger=ledger, ring=self._ring, subscribers=self._subscribers,
            path=self._path,
        )
        self._actor: Ref = system.spawn(TopicActor, self._path, name=f"{self._prefix}/topic")
        self._state_lock = threading.Lock()
        self._torn_down = False
        self._pools_stopped = False

    def __repr__(self) -> str:
        return f"Topic(name={self._name!r}, closed={self.closed})"

    @property
    def name(self) -> str:
        """The topic's name."""
        return self._name

    @property
    def settings(self) -> TopicSettings:
        """The topic's settings (after the bus defaults cascaded)."""
        return self._settings

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._ledger.closed

    @property
    def dead_letters(self) -> DeadLetterQueue:
        """The topic's dead letters."""
        return self._dead_letters

    def publish(
        self, message: T, *, key: str | None = None, attributes: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> PublishReport:
        """Publish one message to every balanced group and broadcast subscriber.

        Blocks on the throttle, on ``max_pending`` and on a full ``block`` group, each
        wait bounded by ``timeout`` seconds (None: unbounded).

        Returns:
            An enqueue-time `PublishReport`; its ``outcome`` resolves once all settled.

        Raises:
            TopicClosedError: the topic is closed (also when it closes while waiting).
            MessageTypeError: ``message`` is not an instance of ``message_type``.
            WouldBlock: ``timeout`` passed while waiting.
            TypeError: ``attributes`` is not a mapping of `str` to `str`, or ``key``
                is not a `str` (nothing of the publish is left behind).
            ValueError: ``timeout`` is NaN or infinite (nothing was sent).
        """
        if timeout is None:
            handling: Topic[Any] | None = getattr(self._handling, "topic", None)
            if handling is not None:  # a handler's publish: bounded, never a hang
                return self._publish_from_handler(handling, message, key, attributes)
        return self._path.publish_one(message, key, attributes, timeout)

    def _publish_from_handler(
        self, handling: Topic[Any], message: Any, key: str | None,
        attributes: dict[str, str] | None,
    ) -> PublishReport:
        """A publish without a timeout from a handler of ``handling``: it waits at most
        that topic's ``ack_timeout`` (`_HANDLER_WAIT` without one; the delivery expires
        meanwhile anyway). Topics that feed each other through full groups (or a
        handler publishing into its own full topic) would otherwise wait forever: each
        handler waits for room only the other's handler can make.

        Raises:
            WouldBlock: the wait ran out; it names the topics of the cycle.
        """
        bound = handling.settings.ack_timeout or _HANDLER_WAIT
        started = time.monotonic()
        try:
            return self._path.publish_one(message, key, attributes, bound)
        except WouldBlock as exc:
            if time.monotonic() - started < bound:
                raise  # refused sooner, with its own reason (a group's own member)
            held = self.held_by() or "it has no room"
            if handling is self:
                raise WouldBlock(
                    f"a handler of topic {self._name!r} waited {bound:g} s to publish into "
                    f"its own topic ({held}): only its own progress can make room; pass "
                    f"publish(timeout=) or make room") from exc
            raise WouldBlock(
                f"a handler of topic {handling.name!r} waited {bound:g} s to publish to "
                f"topic {self._name!r} ({held}): a cycle if {self._name!r}'s handlers wait "
                f"on {handling.name!r} in turn; pass publish(timeout=) or make room"
            ) from exc

    def _handles(self, handler: Handler) -> Handler:
        """``handler``, marking its thread as one running a handler of this topic (one
        store per delivery; a member's thread runs one handler only), so a publish from
        it is bounded (`_publish_from_handler`) and a flush can ask (`_handling_topic`)."""
        handling = self._handling

        def marked(delivery: Delivery[Any]) -> Any:
            handling.topic = self
            return handler(delivery)

        return marked

    def _handling_topic(self) -> Topic[Any] | None:
        """The topic of this bus whose handler the calling thread runs (None: none), for
        a blocking call that must not wait on its own topic forever (a flush)."""
        topic: Topic[Any] | None = getattr(self._handling, "topic", None)
        return topic

    def publisher(self, **options: Any) -> Publisher:
        """A batching `Publisher` for this topic (options: see `runtime.Publisher`).

        Its actor runs in the bus's system; the topic closes it when it shuts down.

        Raises:
            TopicClosedError: the topic is closed.
            InvalidSettingsError: the topic's ``message_type`` accepts no `Message`.
        """
        from runtime.publisher._publisher import Publisher

        self._check_open()
        options.setdefault("clock", self._clock)
        publisher = Publisher(self, system=self._system, **options)
        with self._state_lock:
            self._publishers.append(publisher)
        return publisher

    def _publish_batches(
        self, batches: Sequence[Batch], *, deadline: float | None = None,
    ) -> Future[list[BatchOutcome]]:
        """Publish ``batches`` in order, in one mailbox message: the one way a batch
        enters the topic (Publisher, broker, Spark sink).

        A batch is ``(datas, attributes, keys)`` (parallel lists; an empty key is no key),
        or a `Block` from `_stamp_parts`. Never blocks. The future never fails: it
        resolves, in the topic's thread (at once when the topic is closed), with one
        `BatchOutcome` per batch in order: ``(ids, None)`` once the whole batch was
        accepted; ``(ids, error)`` when only a prefix was (the topic closed, or the
        deadline passed); ``(None, error)`` when none was (closed, the deadline, or a
        check refused this batch: the others are published all the same).

        ``deadline`` (``time.monotonic()`` based; None: no bound, the Publisher's case)
        ends every wait for room (``max_pending``, a full ``block`` group, a blocking
        ring): a batch still waiting then stops at the message it waited for, and the
        rest is refused with `WouldBlock`, leaving nothing behind (not counted, not
        pending, no slot held). Cancelling the future while the topic has not started
        on it (``cancel()`` returns True) publishes none of the batches.
        """
        future: Future[list[BatchOutcome]] = Future()
        with self._state_lock:
            if not (self._ledger.closed or self._torn_down):
                self._actor.tell(PublishBatches(batches, future, deadline))
                return future
        future.set_result([(None, TopicClosedError(self._name))] * len(batches))
        return future

    def _publish_batch(self, messages: list[Message]) -> Future[Sequence[str]]:
        """`_publish_batches` of one batch of `Message` objects, as a future of its ids: a
        convenience for tests and tools (the Publisher, the broker and the Spark sink
        call `_publish_batches`)."""
        return batch_ids(self._publish_batches([parts_of(messages)]))

    def _stamp_parts(
        self, datas: list[bytes], attributes: list[dict[str, str]], keys: list[str | None],
    ) -> Block:
        """Accept a batch ahead of its publish (ids and publish time given now): a staged
        sink part, published when its batch commits (`_publish_batches`).

        Raises:
            TopicClosedError, MessageTypeError, TypeError: the batch is refused whole.
        """
        return self._path.stamp_parts(datas, attributes, keys)

    def _check_open(self) -> None:
        """Raise `TopicClosedError` once the topic is closed."""
        if self._ledger.closed:
            raise TopicClosedError(self._name)

    def subscribe(
        self, handler: Handler, *, group: str | None = None, workers: int = 0,
        auto_ack: bool = False, prefetch: int | None = None,
    ) -> Subscription:
        """Attach ``handler(delivery)``: a broadcast subscriber, or a member of ``group``.

        With ``workers=N`` (needs a group) the handler runs in N worker processes.
        ``prefetch`` (group members): how many deliveries the group may hand a member
        before it settles them (None: up to 32 for a thread member; two hand-overs in
        flight for a worker process, their size growing with the backlog).

        Raises:
            TopicClosedError: the topic is closed.
            InvalidSettingsError: ``workers`` or ``prefetch`` is not valid.
        """
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise InvalidSettingsError("workers", f"must be an int >= 0, got {workers!r}")
        if workers and group is None:
            raise InvalidSettingsError("workers", "process workers need a group")
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1
        ):
            raise InvalidSettingsError("prefetch", f"must be None or an int >= 1, got {prefetch!r}")
        self._check_open()
        if workers and group is not None:
            return self._subscribers.subscribe_workers(handler, group, auto_ack, workers, prefetch)
        return self._subscribers.subscribe(self._handles(handler), group, auto_ack, prefetch)

    def subscription(self, *, group: str | None = None, prefetch: int = 1) -> PullSubscription[T]:
        """A pull subscription: a broadcast reader (``group=None``) or a group member.

        ``prefetch`` (group members): how many deliveries the group may hand this member
        ahead of ``receive``; their ack deadlines run from that hand-over.

        Raises:
            TopicClosedError: the topic is closed.
            InvalidSettingsError: ``prefetch`` is not an int >= 1.
        """
        self._check_open()
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise InvalidSettingsError("prefetch", f"must be an int >= 1, got {prefetch!r}")
        return self._subscribers.subscription(group, prefetch)

    def _lease_member(self, group: str, prefetch: int) -> PullSubscription[T]:
        """A pull member of ``group`` for the broker's lease log: it reads whole
        hand-overs (`PullSubscription.receive_tranches`), no per-message object on the
        all-acked path.

        Raises:
            TopicClosedError: the topic is closed.
        """
        self._check_open()
        return self._subscribers.subscription(group, prefetch, tranches=True)

    def _queued(self, group: str) -> int:
        """Messages ``group`` holds for its members, not handed to one yet (0: no such
        group)."""
        return next((h.gate.used for h in self._subscribers.handles if h.name == group), 0)

    def create_group(self, name: str) -> None:
        """Create balanced group ``name`` with no members yet (messages wait in it)."""
        self._check_open()
        self._subscribers.create_group(name)

    def groups(self) -> list[str]:
        """The balanced groups' names."""
        return self._subscribers.names()

    def delete_group(self, name: str) -> None:
        """Remove a group; what waits in it is dead-lettered ``unsubscribed``."""
        self._subscribers.delete_group(name)

    def _sync(self, timeout: float | None = 5.0) -> None:
        """Return once every settlement made before the call has been applied to the stats.

        Settlements reach the tracker actor by mail; it answers asks in mailbox order.
        """
        self._tracker.ask(None, timeout=timeout).result(timeout)

    def _dead_letter(self, message: Message, *, reason: str, error: str | None) -> None:
        """Put a message refused on its way in (a Spark row flagged by its error column)
        into the dead letters with an id of its own; it counts as published and nacked."""
        self._check_open()
        self._path.refuse(message, reason, error)

    def stats(self) -> TopicStats:
        """A snapshot of the counters."""
        return self._ledger.stats()

    def reset_stats(self) -> None:
        """Zero the counters (``pending`` is a gauge and stays)."""
        self._ledger.reset_stats()

    def join(self, timeout: float | None = None) -> bool:
        """Block until no message is pending; False if ``timeout`` passed first.

        Raises:
            ValueError: ``timeout`` is NaN or infinite.
        """
        if timeout is not None:
            check_timeout("timeout", timeout)
        return self._ledger.wait_idle(timeout)

    def close(self) -> None:
        """Close: refuse publishes and subscribes, force-nack what is pending (``closed``).

        Idempotent. Wakes blocked publishers (they raise `TopicClosedError`). Returns
        once queued and handed-over deliveries are dead-lettered; subscribers and dead
        letters are kept.
        """
        if self._close_admission():
            self._await_sweep(self._ask_sweep(), None)

    def _close_admission(self) -> bool:
        """Refuse publishes and subscribes, wake every blocked publisher, end the groups'
        queues and the ring (``closed``); False when the topic was closed already. Never
        waits for a handler: what members hold is left to the sweep."""
        with self._state_lock:
            if self._ledger.closed:
                return False
            self._ledger.close()
        unread = self._ring.close()
        if unread:
            self._ledger.settle(
                [Delivery.settled(e, sid, None, 0, "closed") for sid, e in unread]
            )
        self._subscribers.close()
        return True

    def _ask_sweep(self) -> Future[Any] | None:
        """Have the tracker force-nack what is handed over, after the settlements it has
        queued; None when the tracker is gone (its system gave up)."""
        try:
            return self._tracker.ask(SWEEP)
        except ActorError:
            return None

    def _await_sweep(self, reply: Future[Any] | None, deadline: float | None) -> None:
        """Wait for the sweep ``reply``, for as long as the tracker makes progress (a
        backlog of settlements takes what it takes). A tracker gone, or one that settled
        nothing for a slice (`_STOP_TIMEOUT`, or what is left before ``deadline``: a
        dead-letter callback that blocks), is bypassed: the books are swept here."""
        if reply is not None:
            progress = self._ledger.stats()
            while True:
                wait = _STOP_TIMEOUT if deadline is None else min(
                    _STOP_TIMEOUT, max(deadline - time.monotonic(), _MIN_SLICE))
                try:
                    reply.result(wait)
                    return
                except TimeoutError:
                    now = self._ledger.stats()
                    if now == progress:
                        break
                    progress = now
                except ActorError:  # the tracker stopped meanwhile
                    break
            logger.warning("topic %s: its tracker settled nothing for %.1f s; closing "
                           "without it", self._name, wait)
        self._ledger.sweep("closed")

    def _shutdown(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Close, then stop every actor of the topic, all within ``timeout`` seconds
        (`Bus.close` runs the same steps for every topic at once)."""
        deadline = time.monotonic() + timeout
        self._refuse_publishers()
        self._close_publishers(deadline)
        nacked = self._ledger.stats().nacked
        if self._close_admission():
            self._await_sweep(self._ask_sweep(), deadline)
        self._report_forced(nacked)
        self._stop_pools(deadline)
        self._stop_actors(deadline)

    def _refuse_publishers(self) -> None:
        """Have every Publisher refuse new publishes (blocked ones raise code 9)."""
        with self._state_lock:
            publishers = list(self._publishers)
        for publisher in publishers:
            publisher._refuse()

    def _close_publishers(self, deadline: float) -> None:
        """Flush and close the Publishers by ``deadline`` (`close_publishers`)."""
        with self._state_lock:
            publishers, self._publishers = self._publishers, []
        close_publishers(
            publishers, held=lambda: self.held_by() is not None, release=self.close,
            deadline=deadline,
        )

    def _report_forced(self, nacked_before: int) -> None:
        """Log (WARNING) how many settlements the close force-nacked, if any."""
        forced = self._ledger.stats().nacked - nacked_before
        if forced > 0:
            logger.warning("topic %s closed with %d deliveries unsettled: force-nacked as "
                           "'closed' (see its dead letters)", self._name, forced)

    def _stop_pools(self, deadline: float) -> None:
        """Stop the worker pools by ``deadline`` (each gets at least `_POOL_FLOOR`)."""
        with self._state_lock:
            if self._pools_stopped:
                return
            self._pools_stopped = True
        self._subscribers.stop_pools(max(deadline - time.monotonic(), _POOL_FLOOR))

    def _stop_actors(self, deadline: float) -> None:
        """Stop every actor of the topic, subscribers first and the tracker last, by
        ``deadline``: an actor stuck in a handler gets what is left (at least
        `_MIN_SLICE`), then is given up (its mail goes to the system's dead letters)."""
        with self._state_lock:
            if self._torn_down:
                return
            self._torn_down = True
        stuck = []
        for ref in [*self._subscribers.refs(), self._actor, self._tracker]:
            wait = max(deadline - time.monotonic(), _MIN_SLICE)
            started = time.monotonic()
            try:
                ref.stop(timeout=wait)
            except Exception:
                continue
            if time.monotonic() - started >= wait:  # it did not stop: it was given up
                stuck.append(ref.name)
        if stuck:
            logger.warning("topic %s: %s did not stop in time (a handler that does not "
                           "return); given up", self._name, ", ".join(stuck))

    def held_by(self) -> str | None:
        """What a publish would wait for now (``max_pending``, a full group, a broadcast
        subscriber a ring behind), named; None when nothing holds it. Never blocks."""
        return holder(self._name, self._settings, self._ledger, self._subscribers.handles,
                      self._ring)

    def _replayer(self, topic: Any) -> Callable[[DeadLetter], None]:
        """Where ``replay(topic=...)`` sends letters: back to the destination that failed
        each (this topic), or to every destination of another topic."""
        target = self if topic is None else self._resolve(topic)
        target._check_open()
        return self._replay if target is self else target._replay.publish_anew
