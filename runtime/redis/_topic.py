"""A durable topic on Redis Streams: the `Topic` interface over one Redis topic."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from actors import ActorSystem
from runtime.core._message import Message, parts_of
from runtime.core._outcome import ACKED_OUTCOME, Nack, Outcome, PublishReport
from runtime.core._settings import TopicSettings, check_timeout
from runtime.core._stats import TopicStats
from runtime.core.settlement._dead_letters import DeadLetter
from runtime.core.subscribers._subscription import PullSubscription, Subscription
from runtime.errors import InvalidSettingsError, TopicClosedError
from runtime.redis._connection import Connection
from runtime.redis._dead_letters import RedisDeadLetters
from runtime.redis._declare import declare
from runtime.redis._keys import TopicKeys
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
_JOIN_POLL = (0.005, 0.1)  # `join` re-reads the pending gauge, backing off between
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

    Raises:
        InvalidSettingsError: Redis holds the topic with other settings (named), or
            ``partitions`` is not 1.
        BackendUnavailableError: Redis did not answer.
    """

    def __init__(self, name: str, settings: TopicSettings, *, connection: Connection,
                 codec: Codec, system: ActorSystem, resolve: Callable[[Any], Any],
                 clock: Callable[[], float] = time.monotonic, prefix: str = "bus",
                 declared: bool = False) -> None:
        if settings.partitions != 1:
            # The keys are laid out per partition already (TopicKeys.of(topic, p)); spreading
            # a topic over several is a later step, and must not be a silent single stream.
            raise InvalidSettingsError(
                "partitions", f"this version keeps a Redis topic in 1 partition, got "
                f"{settings.partitions!r}")
        self._name = name
        self._settings = settings
        self._connection = connection
        self._keys = keys = TopicKeys.of(name)
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
        self._watch = Watch(connection, keys, name, codec)
        self._dead_letters = RedisDeadLetters(connection, keys, name, codec, self._watch,
                                              self._replayer)
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
            The `PublishReport`; its ``outcome`` resolves once every group settled the
            message, in whichever process (seen here within about 100 ms).

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
        elif not accepted.groups:
            outcome.set_result(ACKED_OUTCOME)
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
        self._connection.run("CREATE_GROUP", [self._keys.stream, self._keys.groups], [name])

    def groups(self) -> list[str]:
        """The balanced groups' names, sorted (every process's)."""
        with self._connection.guard():
            names = self._connection.client.smembers(self._keys.groups)
        return sorted(name.decode() for name in names)

    def delete_group(self, name: str) -> None:
        """Remove group ``name`` for every process; its unsettled messages complete with
        a nack ``unsubscribed`` for that group."""
        self._connection.run("DELETE_GROUP", [*self._keys.settling(), self._keys.groups],
                             [name])

    def stats(self) -> TopicStats:
        """The topic-wide counters, as Redis holds them."""
        with self._connection.guard():
            raw = self._connection.client.hgetall(self._keys.stats)
        counts = {name.decode(): int(value) for name, value in raw.items()}
        return TopicStats(pending=max(counts.get("pending", 0), 0),
                          **{name: counts.get(name, 0) for name in _STATS})

    def reset_stats(self) -> None:
        """Zero the counters for every process (``pending`` is a gauge and stays)."""
        with self._connection.guard():
            self._connection.client.hdel(self._keys.stats, *_STATS)

    def join(self, timeout: float | None = None) -> bool:
        """Block until no message is pending in any group (read from Redis); False if
        ``timeout`` passed first.

        Raises:
            ValueError: ``timeout`` is not finite.
            BackendUnavailableError: Redis did not answer.
        """
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else self._clock() + timeout
        wait = _JOIN_POLL[0]
        while True:
            with self._connection.guard():
                pending = int(self._connection.client.hget(self._keys.stats, "pending") or 0)
            if pending <= 0:
                return True
            if deadline is not None and self._clock() >= deadline:
                return False
            left = wait if deadline is None else min(wait, max(deadline - self._clock(), 0))
            threading.Event().wait(left)
            wait = min(wait * 2, _JOIN_POLL[1])

    def held_by(self) -> str | None:
        """``max_pending`` when a publish would wait for it now, else None."""
        limit = self._settings.max_pending
        if limit is None or not self.groups():
            return None
        pending = self.stats().pending
        return f"topic {self._name!r}: max_pending ({pending}/{limit})" if pending >= limit else None

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
        with self._connection.guard():
            self._connection.client.delete(*self._keys.all())

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
        replayed = self._connection.run(
            "REPLAY", [self._keys.stream, self._keys.groups, self._keys.stats],
            [letter.group, letter.message_id, body, kind, key, attributes])
        if replayed is None:  # its group is gone
            self._dead_letters._write(DeadLetter(
                message=letter.message, message_id=letter.message_id, topic=self._name,
                subscriber_id=-1, group=letter.group, reason="unsubscribed", error=None,
                attempts=letter.attempts, at=time.time(), key=letter.key,
                attributes=letter.attributes))

