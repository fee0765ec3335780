"""A durable topic on Redis Streams: the `Topic` interface over one Redis topic."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from actors import ActorSystem
from runtime.core._message import Message, parts_of
from runtime.core._outcome import Nack, Outcome, PublishReport
from runtime.core._settings import TopicSettings, check_timeout
from runtime.core._stats import TopicStats
from runtime.core.settlement._dead_letters import DeadLetter
from runtime.core.subscribers._subscription import PullSubscription, Subscription
from runtime.errors import TopicClosedError
from runtime.redis._broadcast import Reaper
from runtime.redis._connection import Connection
from runtime.redis._dead_letters import RedisDeadLetters
from runtime.redis._declare import declare
from runtime.redis._keys import TopicKeys, entry_of
from runtime.redis._members import Members
from runtime.redis._publishing import Publishing
from runtime.redis._records import Codec
from runtime.redis._watch import Watch

if TYPE_CHECKING:
    from runtime.publisher._publisher import Publisher

__all__ = ["RedisTopic"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_NO_SUBSCRIBERS = Outcome(acked=False, nacks=(Nack("none", "no_subscribers"),))
_JOIN_POLL = (0.002, 0.01)  # `join` re-reads the pending gauge, backing off between (how
# late it may return: one small read per period)
_STATS = ("published", "delivered", "nacked", "timed_out", "dead_lettered", "throttled",
          "dropped", "lagged", "redelivered")


class RedisTopic(Generic[T]):
    """A topic whose messages, groups, pending deliveries and dead letters live in Redis.

    Made by `Bus.create_topic(..., backend="redis")`. Every process that opens the same
    name on the same Redis shares it: groups are Redis consumer groups whose members, in
    any process, compete; counters and dead letters are topic-wide. Closing this handle
    detaches this process and destroys nothing (`destroy` does).

    Args:
        name: the topic's name.
        settings: its validated settings.
        connection: the bus's Redis connection.
        codec: encodes and decodes bodies (with the bus's ``allow=``).
        system: the actor system the Publishers run in.
        resolve: finds another topic of the bus by name (for ``replay(topic=...)``).
        clock: time source of timeouts and ack deadlines measured here.
        prefix: the bus's actor-name prefix.
        declared: the topic exists with these settings (read back from Redis by an
            inspector): attach without comparing them.

    With ``partitions=P`` the topic is P streams, each in its own hash slot with its
    own groups' books and dead letters; counters, pending, outcomes and dead letters are
    read across them. Each partition of a group is owned by one member at a time
    (`owners`), which keeps each key's messages in order across processes and hosts.

    Raises:
        InvalidSettingsError: Redis holds the topic with other settings (named).
        BackendUnavailableError: Redis did not answer.
    """

    def __init__(self, name: str, settings: TopicSettings, *, connection: Connection,
                 codec: Codec, system: ActorSystem, resolve: Callable[[Any], Any],
                 clock: Callable[[], float] = time.monotonic, prefix: str = "bus",
                 declared: bool = False) -> None:
        self._name = name
        self._settings = settings
        self._connection = connection
        self._keys = keys = TopicKeys.of(name)
        self._parts = [keys] + [TopicKeys.of(name, p) for p in range(1, settings.partitions)]
        self._system = system
        self._resolve = resolve
        self._clock = clock
        self._prefix = f"{prefix}/{name}"
        connection.ping()
        if not declared:
            declare(connection, keys, settings)
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._publishers: list[Publisher] = []
        self._codec = codec
        self._path = Publishing(name, settings, connection, keys, codec, self._closing, clock)
        self._reaper = Reaper(connection, self._parts, settings, clock)
        self._watch = Watch(connection, keys, name, codec, self._reaper, settings.partitions)
        self._dead_letters = RedisDeadLetters(connection, keys, name, codec, self._watch,
                                              self._replayer, settings.partitions)
        self._members = Members(name, settings, connection, keys, codec, self.create_group,
                                clock)

    def __repr__(self) -> str:
        return f"RedisTopic(name={self._name!r}, closed={self.closed})"

    @property
    def name(self) -> str:
        """The topic's name."""
        return self._name

    @property
    def settings(self) -> TopicSettings:
        """The topic's settings."""
        return self._settings

    @property
    def closed(self) -> bool:
        """True once this handle was closed (the topic lives on in Redis)."""
        return self._closing.is_set()

    @property
    def dead_letters(self) -> RedisDeadLetters:
        """The topic's dead letters, shared by every process."""
        return self._dead_letters

    def publish(self, message: T, *, key: str | None = None,
                attributes: dict[str, str] | None = None, timeout: float | None = None,
                ) -> PublishReport:
        """Publish one message to every balanced group and broadcast reader.

        Blocks for one Redis call, and while ``max_pending`` messages are pending (bounded
        by ``timeout`` seconds).

        Returns:
            The `PublishReport`; its ``outcome`` resolves once every group and every
            broadcast reader attached at publish settled the message, in whichever
            process (seen here within about 100 ms).

        Raises:
            TopicClosedError: this handle is closed (also while waiting).
            MessageTypeError: ``message`` is not an instance of ``message_type``.
            TypeError: a bad key or attributes.
            WouldBlock: ``timeout`` passed while waiting.
            BackendUnavailableError: Redis did not answer.
        """
        fields = self._path.fields(message, key, attributes)
        accepted = self._path.send([[fields]], timeout)[0]
        message_id = accepted.ids[0]
        outcome: Future[Outcome] = Future()
        if accepted.dead:
            outcome.set_result(_NO_SUBSCRIBERS)
        else:
            self._watch.expect(message_id, outcome)
        return PublishReport(message_id=message_id,
                             balanced=dict.fromkeys(accepted.groups, "enqueued"),
                             broadcast=accepted.readers, outcome=outcome)

    def publisher(self, **options: Any) -> Publisher:
        """A batching `Publisher` for this topic (options: see `runtime.Publisher`).

        Raises:
            TopicClosedError: this handle is closed.
            InvalidSettingsError: the topic's ``message_type`` accepts no `Message`.
        """
        from runtime.publisher._publisher import Publisher

        self._check_open()
        options.setdefault("clock", self._clock)
        publisher = Publisher(self, system=self._system, **options)
        with self._lock:
            self._publishers.append(publisher)
        return publisher

    def _publish_batches(
        self, parts: Sequence[tuple[list[bytes], list[dict[str, str]], Sequence[str | None]]],
        *, deadline: float | None = None,
    ) -> Future[list[tuple[Sequence[str] | None, BaseException | None]]]:
        """The topic's batch call (the Publisher's): every batch in one round trip (a
        script call each, so each is confirmed or failed alone); a done future of their
        outcomes, in order.

        Runs in the caller's thread and blocks it while ``max_pending`` holds, until
        ``deadline`` (``time.monotonic()`` based; None: no bound; then `WouldBlock`)."""
        future: Future[list[tuple[Sequence[str] | None, BaseException | None]]] = Future()
        try:
            self._path.check_open_for_messages()
            batches = [self._path.message_fields(*part) for part in parts]
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            accepted = self._path.send(batches, timeout)
        except Exception as exc:
            future.set_result([(None, exc)] * len(parts))
            return future
        future.set_result([(batch.ids, None) for batch in accepted])
        return future

    def _publish_batch(self, messages: list[Message]) -> Future[Sequence[str]]:
        """`_publish_batches` of one batch of `Message` objects, as a future of the ids:
        a convenience for tests and tools."""
        future: Future[Sequence[str]] = Future()
        ((ids, error),) = self._publish_batches([parts_of(messages)]).result()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(ids or [])
        return future

    def subscribe(self, handler: Callable[[Any], Any], *, group: str | None = None,
                  workers: int = 0, auto_ack: bool = False, prefetch: int | None = None,
                  ) -> Subscription:
        """Attach ``handler(delivery)``: a broadcast reader, or a member of ``group``
        (a thread of this process, or ``workers`` processes that read Redis themselves).

        Raises:
            TopicClosedError: this handle is closed.
            InvalidSettingsError: bad ``workers`` or ``prefetch``.
            BackendUnavailableError: Redis did not answer.
        """
        self._check_open()
        return self._members.subscribe(handler, group, workers, auto_ack, prefetch)

    def subscription(self, *, group: str | None = None, prefetch: int = 1,
                     ) -> PullSubscription[T]:
        """A pull subscription: a broadcast reader (``group=None``) or a group member.

        Raises:
            TopicClosedError: this handle is closed.
            InvalidSettingsError: ``prefetch`` is not an int >= 1.
        """
        self._check_open()
        return self._members.subscription(group, prefetch)

    def create_group(self, name: str) -> None:
        """Make balanced group ``name`` exist (a Redis consumer group from now on):
        messages published from now wait in it until a member reads them. Idempotent."""
        self._check_open()
        self._connection.pipelined("CREATE_GROUP", [([part.stream, part.groups], [name])
                                                    for part in self._parts])

    def groups(self) -> list[str]:
        """The balanced groups' names, sorted (every process's)."""
        with self._connection.guard():
            names = self._connection.client.smembers(self._keys.groups)
        return sorted(name.decode() for name in names)

    def delete_group(self, name: str) -> None:
        """Remove group ``name`` for every process; its unsettled messages complete with
        a nack ``unsubscribed`` for that group."""
        self._connection.pipelined("DELETE_GROUP", [([*part.settling(), part.groups], [name])
                                                    for part in self._parts])

    def stats(self) -> TopicStats:
        """The topic-wide counters, as Redis holds them (summed over the partitions)."""
        counts: dict[str, int] = {}
        for raw in self._each("hgetall", lambda part: part.stats):
            for name, value in raw.items():
                counts[name.decode()] = counts.get(name.decode(), 0) + int(value)
        return TopicStats(pending=max(counts.get("pending", 0), 0),
                          **{name: counts.get(name, 0) for name in _STATS})

    def owners(self) -> dict[str, list[str | None]]:
        """Who owns each partition of each group now: per group, the owning member's
        consumer name (``host:pid:...:subscription``) per partition, None while nobody
        does. A topic of one partition has no owners (its members compete): ``{}``."""
        if len(self._parts) == 1:
            return {}
        owners = {}
        for group in self.groups():
            held = self._each("get", functools.partial(TopicKeys.owner, group=group))
            owners[group] = [None if name is None else name.decode() for name in held]
        return owners

    def reset_stats(self) -> None:
        """Zero the counters for every process (``pending`` is a gauge and stays)."""
        self._each("hdel", lambda part: part.stats, *_STATS)

    def _each(self, command: str, key: Callable[[TopicKeys], str], *args: Any) -> list[Any]:
        """``command(key(part), *args)`` on every partition, in one round trip; the replies
        in partition order."""
        with self._connection.guard():
            if len(self._parts) == 1:
                return [getattr(self._connection.client, command)(key(self._keys), *args)]
            pipe = self._connection.client.pipeline(transaction=False)
            for part in self._parts:
                getattr(pipe, command)(key(part), *args)
            return list(pipe.execute())

    def join(self, timeout: float | None = None) -> bool:
        """Block until no message is pending for any group or broadcast reader (read
        from Redis); False if ``timeout`` passed first.

        While it waits it releases the share of readers presumed gone (`Reaper`).

        Raises:
            ValueError: ``timeout`` is not finite.
            BackendUnavailableError: Redis did not answer.
        """
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else self._clock() + timeout
        wait = _JOIN_POLL[0]
        while True:
            self._reaper.due()
            pending = sum(int(value or 0) for value in
                          self._each("hget", lambda part: part.stats, "pending"))
            if pending <= 0:
                return True
            if deadline is not None and self._clock() >= deadline:
                return False
            left = wait if deadline is None else min(wait, max(deadline - self._clock(), 0))
            threading.Event().wait(left)
            wait = min(wait * 2, _JOIN_POLL[1])

    def held_by(self) -> str | None:
        """``max_pending`` when a publish would wait for it now (in a partition: each one
        bounds its own pending messages), else None. Groups and broadcast readers alike
        hold messages pending."""
        limit = self._settings.max_pending
        if limit is None:
            return None
        pending = [int(value or 0) for value in
                   self._each("hget", lambda part: part.stats, "pending")]
        if len(pending) == 1:
            held = pending[0]
            return f"topic {self._name!r}: max_pending ({held}/{limit})" if held >= limit else None
        full = [p for p, held in enumerate(pending) if held >= limit]
        if not full:
            return None
        return (f"topic {self._name!r}: max_pending ({pending[full[0]]}/{limit}) in partition "
                f"{full[0]}")

    def close(self) -> None:
        """Detach this handle: stop this process's members and publishers, hand their
        unsettled deliveries back to their groups (no attempt counted), nack nothing.

        Idempotent. Blocked publishers wake and raise `TopicClosedError`; what waits in
        groups stays in Redis for the next process that opens the topic.
        """
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
            publishers, self._publishers = self._publishers, []
        for publisher in publishers:
            try:
                publisher.close(timeout=5.0)
            except Exception:
                logger.warning("topic %s: a publisher did not close cleanly", self._name,
                               exc_info=True)
        self._members.close()
        self._watch.stop()

    def destroy(self) -> None:
        """Close this handle, then delete every key of the topic (its messages, groups,
        counters and dead letters) for every process."""
        self.close()
        groups = self.groups()
        with self._connection.guard():
            for part in self._parts:  # one slot at a time (a Redis Cluster refuses more)
                leases = [part.owner(group) for group in groups]
                if part is self._keys:
                    leases += [part.members(group) for group in groups]
                self._connection.client.delete(*part.all(), *leases)

    def _shutdown(self, timeout: float = 5.0) -> None:
        """What the bus calls to remove or close the topic: `close`."""
        self.close()

    def _check_open(self) -> None:
        if self._closing.is_set():
            raise TopicClosedError(self._name)

    def _replayer(self, topic: Any) -> Callable[[DeadLetter], None]:
        """Where ``replay(topic=...)`` sends letters: to the group that failed each (this
        topic), or anew to every destination of another topic."""
        target = self if topic is None else self._resolve(topic)
        target._check_open()
        if target is self:
            return self._replay_one

        def publish_anew(letter: DeadLetter) -> None:
            target.publish(letter.message, key=letter.key, attributes=letter.attributes or None)

        return publish_anew

    def _replay_one(self, letter: DeadLetter) -> None:
        if letter.group is None or letter.reason in ("no_subscribers", "dropped"):
            self.publish(letter.message, key=letter.key, attributes=letter.attributes or None)
            return
        body, kind, key, attributes = self._codec.fields(letter.message, letter.key,
                                                         letter.attributes or None)
        part = self._parts[min(entry_of(letter.message_id)[0], len(self._parts) - 1)]
        replayed = self._connection.run(
            "REPLAY", [part.stream, part.groups, part.stats],
            [letter.group, letter.message_id, body, kind, key, attributes])
        if replayed is None:  # its group is gone
            self._dead_letters._write(DeadLetter(
                message=letter.message, message_id=letter.message_id, topic=self._name,
                subscriber_id=-1, group=letter.group, reason="unsubscribed", error=None,
                attempts=letter.attempts, at=time.time(), key=letter.key,
                attributes=letter.attributes))

