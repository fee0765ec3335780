"""This process's subscribers of a Redis topic: thread members, readers, pull subscriptions."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from runtime.core._settings import TopicSettings
from runtime.core.subscribers._subscription import PullSubscription, Source, Subscription
from runtime.errors import BackendUnavailableError, InvalidSettingsError
from runtime.redis._broadcast import BroadcastReader
from runtime.redis._connection import Connection
from runtime.redis._consumer import Consumer
from runtime.redis._keys import TopicKeys
from runtime.redis._member import MemberLoop, PullSource
from runtime.redis._partitions import AllPartitions, OwnedPartitions
from runtime.redis._records import Codec

__all__ = ["Members"]

logger = logging.getLogger(__name__)

DEFAULT_PREFETCH = 100
"""Deliveries a push member reads at once unless told otherwise: fewer reads and ack
calls per message against more deliveries held by one member (and handed back when it
stops). Re-measure with ``python -m benchmarks --only redis_pipeline``."""
_STOP_TIMEOUT = 5.0  # seconds a closing member's running handler may take


@dataclass(eq=False)
class _Attached:
    """One subscription of this process and what runs it."""

    subscription: Subscription
    reader: Consumer | OwnedPartitions | BroadcastReader | AllPartitions
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    source: PullSource | None = None
    workers: Any = None  # a `Workers` for ``workers=N``


class Members:
    """Attaches and detaches this process's subscribers of one topic.

    Args:
        topic: the topic's name.
        settings: its settings.
        connection: the bus's connection.
        keys: the topic's keys.
        codec: decodes entries.
        create_group: makes a group exist in Redis (idempotent).
        clock: the members' time source.
    """

    def __init__(self, topic: str, settings: TopicSettings, connection: Connection,
                 keys: TopicKeys, codec: Codec, create_group: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._topic = topic
        self._settings = settings
        self._connection = connection
        self._keys = keys
        self._codec = codec
        self._create_group = create_group
        self._clock = clock
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._attached: dict[int, _Attached] = {}

    def subscribe(self, handler: Callable[[Any], Any], group: str | None, workers: int,
                  auto_ack: bool, prefetch: int | None) -> Subscription:
        """Attach a push subscriber (see `RedisTopic.subscribe`)."""
        count = _prefetch(prefetch, DEFAULT_PREFETCH)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise InvalidSettingsError("workers", f"must be an int >= 0, got {workers!r}")
        if workers and group is None:
            raise InvalidSettingsError("workers", "worker processes need a group")
        sid = next(self._ids)
        subscription = Subscription(sid, group, lambda: self._detach(sid))
        if workers:
            from runtime.redis._workers import Workers

            assert group is not None
            self._create_group(group)
            pool = Workers(self._connection, self._keys, self._topic, group, sid,
                           self._settings, handler, auto_ack=auto_ack, size=workers,
                           prefetch=count, allow=self._codec.allow)
            attached = _Attached(subscription, pool.consumer, workers=pool)
        else:
            reader = self._reader(group, sid, batch_acks=True)
            attached = _Attached(subscription, reader)
            loop = MemberLoop(reader, handler, auto_ack=auto_ack, topic=self._topic,
                              prefetch=count, stopping=attached.stopping)
            attached.thread = threading.Thread(
                target=loop.run, name=f"redis-member-{self._topic}-{sid}", daemon=True)
        with self._lock:
            self._attached[sid] = attached
        if attached.thread is not None:
            attached.thread.start()
        else:
            attached.workers.start()
        return subscription

    def subscription(self, group: str | None, prefetch: int) -> PullSubscription[Any]:
        """Attach a pull subscription (see `RedisTopic.subscription`)."""
        count = _prefetch(prefetch, 1)
        sid = next(self._ids)
        reader = self._reader(group, sid, batch_acks=False)
        source = PullSource(reader, self._topic, count, self._clock)
        # A RedisDelivery has the Delivery interface; PullSubscription only hands it on.
        pull: PullSubscription[Any] = PullSubscription(
            sid, group, cast("Source", source), lambda: self._detach(sid))
        with self._lock:
            self._attached[sid] = _Attached(pull, reader, source=source)
        return pull

    def close(self) -> None:
        """Detach every subscriber of this process (their deliveries go back to Redis)."""
        with self._lock:
            sids = list(self._attached)
        for sid in sids:
            self._detach(sid)

    def _reader(self, group: str | None, sid: int, *, batch_acks: bool,
                ) -> Consumer | OwnedPartitions | BroadcastReader | AllPartitions:
        """A member's reader: on a topic of one partition, members of a group compete for
        its entries; with several, each partition is owned by one member at a time."""
        partitions = self._settings.partitions
        if group is None:
            if partitions > 1:
                return AllPartitions(self._connection, self._topic, sid,
                                     self._settings.dead_letter_limit, self._codec, self._clock,
                                     partitions)
            return BroadcastReader(self._connection, self._keys, self._topic, sid,
                                   self._settings.dead_letter_limit, self._codec, self._clock)
        if not isinstance(group, str) or not group:
            raise InvalidSettingsError("group", f"must be a non-empty str, got {group!r}")
        self._create_group(group)
        if partitions > 1:
            return OwnedPartitions(self._connection, self._topic, group, sid, self._settings,
                                   self._codec, batch_acks=batch_acks, clock=self._clock)
        return Consumer(self._connection, self._keys, self._topic, group, sid, self._settings,
                        self._codec, batch_acks=batch_acks, clock=self._clock)

    def _detach(self, sid: int) -> None:
        """Stop one subscriber and hand back what it holds, with no attempt counted.

        A handler still running after `_STOP_TIMEOUT` keeps its thread; its delivery is
        handed back anyway (its late settlement is refused by the fence).
        """
        with self._lock:
            attached = self._attached.pop(sid, None)
        if attached is None:
            return
        attached.stopping.set()
        if attached.source is not None:
            attached.source.close()
        if attached.thread is not None:
            attached.thread.join(timeout=_STOP_TIMEOUT)
            if attached.thread.is_alive():
                logger.warning("topic %s: a handler of subscription %d still runs after "
                               "%.0f s; its delivery goes back to the group", self._topic,
                               sid, _STOP_TIMEOUT)
        if attached.workers is not None:
            attached.workers.stop(_STOP_TIMEOUT)
            return
        try:
            if isinstance(attached.reader, BroadcastReader | AllPartitions):
                attached.reader.detach()
            else:
                attached.reader.release()
        except BackendUnavailableError as exc:
            logger.warning("topic %s: could not hand back subscription %d's deliveries "
                           "(%s); they return after their ack deadline", self._topic, sid, exc)


def _prefetch(value: int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSettingsError("prefetch", f"must be an int >= 1, got {value!r}")
    return value
