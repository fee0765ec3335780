"""The Bus: a set of named topics on one ActorSystem, with one timer thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from actors import ActorSystem, Event
from runtime.core._outcome import PublishReport
from runtime.core._settings import TopicSettings
from runtime.core._stats import TopicStats
from runtime.core._topic import Topic
from runtime.core.settlement._dead_letters import DeadLetterQueue
from runtime.core.settlement._timer import Timer

if TYPE_CHECKING:
    from runtime.broker._server import BusServer
from runtime.errors import (
    InvalidSettingsError,
    TopicClosedError,
    TopicExistsError,
    TopicNotFoundError,
)

__all__ = ["Bus"]

logger = logging.getLogger(__name__)

# The time `close` gives all topics together to settle and stop (see `Topic`'s stop
# timeout for what it trades).
_CLOSE_BUDGET = 5.0


class Bus:
    """Named topics sharing an `ActorSystem` (its own unless one is given) and a timer.

    Use as a context manager, or call `close`.

    Args:
        system: run the actors here (the bus then never shuts it down).
        defaults: settings every `create_topic` starts from.
        redis: the connection of ``backend="redis"`` topics: a ``redis://`` URL or a
            ``redis.Redis`` client, or for a Redis Cluster a ``redis+cluster://`` URL (any
            node) or a ``redis.cluster.RedisCluster`` (``redis`` is imported when the first
            such topic is made).
        allow: the user's plain classes a Redis topic's pickled bodies may name.
        clock: time source for ack deadlines (injectable for tests).
        sleep: the throttle's sleep (injectable for tests).
    """

    def __init__(
        self, *, system: ActorSystem | None = None, defaults: TopicSettings | None = None,
        redis: Any = None, allow: tuple[type, ...] = (),
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self._owns_system = system is None
        self._system = ActorSystem("actorbus") if system is None else system
        self._defaults = TopicSettings() if defaults is None else defaults
        self._clock = clock
        self._sleep = sleep
        self._prefix = "bus" if self._owns_system else f"bus-{id(self):x}"
        self._timer = Timer(clock=clock, name=f"{self._prefix}-timer")
        self._topics: dict[str, Topic[Any]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._servers: list[BusServer] = []
        self._closers: list[threading.Thread] = []
        self._handling = threading.local()  # per thread: the topic whose handler it runs
        self._unwatch = self._system.events.subscribe(self._on_event)
        self._redis = redis
        self._allow = tuple(allow)
        self._redis_backend: Any = None  # (Connection, Codec), made with the first Redis topic

    def __enter__(self) -> Bus:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Bus(topics={self.topics()!r}, closed={self._closed})"

    @property
    def system(self) -> ActorSystem:
        """The actor system the topics run on."""
        return self._system

    @property
    def defaults(self) -> TopicSettings:
        """The settings every new topic starts from."""
        return self._defaults

    def create_topic(self, name: str, **settings: Any) -> Topic[Any]:
        """Create topic ``name``: the bus defaults with ``settings`` applied, validated.

        Raises:
            InvalidSettingsError: empty name, unknown setting or a value out of range.
            UnsupportedPolicyError: the backend cannot honour a policy value.
            TopicExistsError: the name is taken.
            TopicClosedError: the bus is closed.
            BackendUnavailableError: a Redis topic's Redis did not answer.
        """
        if not isinstance(name, str) or not name:
            raise InvalidSettingsError("name", f"must be a non-empty str, got {name!r}")
        with self._lock:
            if self._closed:
                raise TopicClosedError(name)
            if name in self._topics:
                raise TopicExistsError(name)
            merged = self._defaults.merged(**settings)
            merged.validate()
            if merged.backend == "redis":
                # A RedisTopic has the Topic interface (runtime.redis._topic).
                self._topics[name] = cast("Topic[Any]", self._redis_topic(name, merged))
                return self._topics[name]
            topic: Topic[Any] = Topic(
                name, merged, system=self._system, timer=self._timer, resolve=self._resolve,
                clock=self._clock, sleep=self._sleep, prefix=self._prefix,
                handling=self._handling,
            )
            self._topics[name] = topic
            return topic

    def _redis_topic(self, name: str, settings: TopicSettings) -> Any:
        """A ``backend="redis"`` topic on the bus's Redis (its lock held)."""
        if self._redis is None:
            raise InvalidSettingsError(
                "redis", "backend='redis' needs a connection: "
                "Bus(redis=URL, redis.Redis or RedisCluster)")
        from runtime.redis import Codec, Connection, RedisTopic

        if self._redis_backend is None:
            self._redis_backend = (Connection(self._redis), Codec(self._allow))
        connection, codec = self._redis_backend
        return RedisTopic(name, settings, connection=connection, codec=codec,
                          system=self._system, resolve=self._resolve, clock=self._clock,
                          prefix=self._prefix)

    def topic(self, name: str) -> Topic[Any]:
        """The topic called ``name``.

        Raises:
            TopicNotFoundError: no such topic.
        """
        try:
            return self._topics[name]
        except KeyError:
            raise TopicNotFoundError(name) from None

    def topics(self) -> list[str]:
        """The topics' names, in creation order."""
        return list(self._topics)

    def remove_topic(self, name: str) -> None:
        """Close topic ``name`` and stop its actors.

        Raises:
            TopicNotFoundError: no such topic.
        """
        with self._lock:
            topic = self._topics.pop(name, None)
        if topic is None:
            raise TopicNotFoundError(name)
        topic._shutdown()

    def publish(self, name: str, message: Any, **options: Any) -> PublishReport:
        """``bus.topic(name).publish(message, **options)``."""
        return self.topic(name).publish(message, **options)

    def dead_letters(self, name: str) -> DeadLetterQueue:
        """The dead letters of topic ``name``."""
        return self.topic(name).dead_letters

    def stats(self) -> dict[str, TopicStats]:
        """Every topic's stats, by name."""
        return {name: topic.stats() for name, topic in list(self._topics.items())}

    def held_by(self) -> dict[str, str]:
        """For each topic whose publishers would wait right now: what holds them, named
        (``max_pending``, a full group, a broadcast subscriber a ring behind). Never blocks."""
        held = {name: topic.held_by() for name, topic in list(self._topics.items())}
        return {name: text for name, text in held.items() if text is not None}

    def serve(self, address: tuple[str, int] | str = ("127.0.0.1", 0), *, authkey: bytes | str,
              **limits: Any) -> BusServer:
        """Serve this bus to other processes: the broker endpoint (``runtime.broker``).

        Binds loopback unless told otherwise; peers must pass the HMAC challenge with
        ``authkey`` (a `str` is its UTF-8 bytes) before any data. ``allow=(Order, ...)``
        lets those plain classes cross; see `BusServer` for the other limits. Does not
        block; the bus closes the server on close.
        """
        from runtime.broker._server import serve

        server = serve(self, address, authkey=authkey, **limits)
        with self._lock:
            self._servers.append(server)
        return server

    def close(self) -> None:
        """Close every topic, stop their actors and the timer; idempotent.

        One budget for the whole bus (`Topic`'s stop timeout, a few seconds), however
        many topics: Publishers are flushed, then every topic's admission closes at once
        (every blocked publisher wakes and raises), then every tracker sweeps what is
        still pending (force-nacked ``closed``, logged at WARNING per topic), then the
        actors stop, a handler that does not return given up once the budget is spent.
        Shuts the actor system down only if the bus created it.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            topics = list(self._topics.values())
            servers, self._servers = self._servers, []
        deadline = time.monotonic() + _CLOSE_BUDGET
        self._unwatch()
        for closer in self._closers:
            closer.join(timeout=max(deadline - time.monotonic(), 0.0))
        for server in servers:
            server.close()
        # A Redis topic detaches on its own (nothing to sweep: what waits stays in Redis).
        for topic in [t for t in topics if not isinstance(t, Topic)]:
            topic.close()
        topics = [t for t in topics if isinstance(t, Topic)]
        for topic in topics:
            topic._refuse_publishers()
        for topic in topics:
            topic._close_publishers(deadline)
        nacked = [topic.stats().nacked for topic in topics]
        closing = [topic for topic in topics if topic._close_admission()]
        for topic, reply in [(topic, topic._ask_sweep()) for topic in closing]:
            topic._await_sweep(reply, deadline)
        for topic, before in zip(topics, nacked, strict=True):
            topic._report_forced(before)
        for topic in topics:
            topic._stop_pools(deadline)
        for topic in reversed(topics):
            topic._stop_actors(deadline)
        self._timer.stop()
        if self._redis_backend is not None:
            self._redis_backend[0].close()
        if self._owns_system:
            self._system.shutdown()

    def _on_event(self, event: Event) -> None:
        """One of a topic's actors was stopped for good (past its restart budget, the root
        supervisor gave it up): that topic can no longer deliver.

        Close it, loudly (pending messages are dead-lettered as ``closed``; publishing
        raises `TopicClosedError`), rather than accept messages nobody will handle. Other
        topics keep running. The close runs on a thread of the bus's own (joined by
        `close`): events arrive on the supervisor's thread, which the close needs.
        """
        if event.kind != "escalated":
            return
        with self._lock:
            broken = [t for t in self._topics.values() if event.name.startswith(f"{t._prefix}/")]
            if self._closed or not broken:
                return
            logger.error("topic %r closes: its actor %r was stopped past its restart budget (%s)",
                         broken[0].name, event.name, event.error)
            closer = threading.Thread(target=broken[0].close, name=f"{self._prefix}-closer")
            self._closers.append(closer)
            closer.start()

    def _resolve(self, topic: Any) -> Topic[Any]:
        return self.topic(topic) if isinstance(topic, str) else topic
