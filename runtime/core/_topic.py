"""A topic: the publish entry point and the handle on its subscribers and books."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from actors import ActorSystem, Ref
from actors.errors import ActorError
from runtime.core._closing import close_publishers
from runtime.core._held import holder
from runtime.core._message import Message
from runtime.core._outcome import PublishReport
from runtime.core._publishing import PublishPath
from runtime.core._replay import Replay
from runtime.core._settings import TopicSettings, check_timeout
from runtime.core._stats import TopicStats
from runtime.core._subscribing import Subscribing
from runtime.core._topic_actor import BatchSeam, TopicActor
from runtime.core.settlement._dead_letters import DeadLetter, DeadLetterQueue
from runtime.core.settlement._delivery import Delivery
from runtime.core.settlement._ledger import Ledger
from runtime.core.settlement._timer import Timer
from runtime.core.settlement._tracker import SWEEP, TICK, TrackerActor
from runtime.core.subscribers._ring import Ring
from runtime.core.subscribers._subscribers import Subscribers

if TYPE_CHECKING:
    from runtime.publisher._publisher import Publisher

__all__ = ["Topic"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_STOP_TIMEOUT = 5.0


class Topic(BatchSeam, Subscribing[T]):
    """A named stream of messages with balanced groups and broadcast subscribers.

    Made by `Bus.create_topic`. Publishing runs in the caller's thread; the topic's
    tracker, groups and subscribers are actors in the bus's `ActorSystem`.
    """

    def __init__(
        self, name: str, settings: TopicSettings, *, system: ActorSystem, timer: Timer,
        resolve: Callable[[Any], Topic[Any]], clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep, prefix: str = "bus",
    ) -> None:
        self._name = name
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
            tracker=tracker, prefix=self._prefix,
        )
        ledger.bind(
            schedule=lambda when: timer.schedule(when, lambda: tracker.tell(TICK)),
            redeliver=self._subscribers.redeliver,
        )
        self._path = PublishPath(
            topic=name, settings=settings, ledger=ledger, ring=self._ring,
            groups=self._subscribers.handles, sleep=sleep,
        )
        self._replay = Replay(
            topic=name, ledger=ledger, ring=self._ring, subscribers=self._subscribers,
            path=self._path,
        )
        self._actor: Ref = system.spawn(TopicActor, self._path, name=f"{self._prefix}/topic")
        self._state_lock = threading.Lock()
        self._torn_down = False

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
        return self._path.publish_one(message, key, attributes, timeout)

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
        check_timeout("timeout", timeout)
        return self._ledger.wait_idle(timeout)

    def close(self) -> None:
        """Close: refuse publishes and subscribes, force-nack what is pending (``closed``).

        Idempotent. Wakes blocked publishers (they raise `TopicClosedError`). Returns
        once queued and handed-over deliveries are dead-lettered; subscribers and dead
        letters are kept.
        """
        with self._state_lock:
            if self._ledger.closed:
                return
            self._ledger.close()
        unread = self._ring.close()
        if unread:
            self._ledger.settle(
                [Delivery.settled(e, sid, None, 0, "closed") for sid, e in unread]
            )
        self._subscribers.close()
        self._await_sweep()

    def _await_sweep(self) -> None:
        """Have the tracker force-nack what is handed over, after the settlements it has
        queued. A tracker still working through a backlog (500k released leases took it
        ~4 s) is waited for; one gone, or one that settled nothing for a whole `_STOP_TIMEOUT`
        (a dead-letter callback that blocks), is bypassed: the books are swept here."""
        try:
            reply = self._tracker.ask(SWEEP)
            progress = self._ledger.stats()
            while True:
                try:
                    reply.result(_STOP_TIMEOUT)
                    return
                except TimeoutError:
                    now = self._ledger.stats()
                    if now == progress:
                        break
                    progress = now
            logger.warning("topic %s: its tracker settled nothing for %.0f s; closing "
                           "without it", self._name, _STOP_TIMEOUT)
        except ActorError:  # the tracker is gone (its system gave up)
            pass
        self._ledger.sweep("closed")

    def _shutdown(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Close, then stop every actor of the topic (subscribers first, tracker last)."""
        with self._state_lock:
            publishers, self._publishers = self._publishers, []
        close_publishers(
            publishers, held=lambda: self.held_by() is not None, release=self.close,
            timeout=timeout,
        )
        self.close()
        with self._state_lock:
            if self._torn_down:
                return
            self._torn_down = True
        self._subscribers.stop_pools(timeout)
        for ref in [*self._subscribers.refs(), self._actor, self._tracker]:
            try:
                ref.stop(timeout=timeout)
            except Exception:
                continue

    def held_by(self) -> str | None:
        """What a publish would wait for now (``max_pending``, a full group, a broadcast
        subscriber a ring behind), named; None when nothing holds it. Never blocks."""
        return holder(self._name, self._settings, self._ledger, self._subscribers.handles(),
                      self._ring)

    def _replayer(self, topic: Any) -> Callable[[DeadLetter], None]:
        """Where ``replay(topic=...)`` sends letters: back to the destination that failed
        each (this topic), or to every destination of another topic."""
        target = self if topic is None else self._resolve(topic)
        target._check_open()
        return self._replay if target is self else target._replay.publish_anew
