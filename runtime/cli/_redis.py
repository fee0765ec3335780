"""``--redis URL`` for ``stats`` and ``dlq``: read the topics a Redis holds directly."""

from __future__ import annotations

import contextlib
from typing import Any

from actors import ActorSystem

__all__ = ["RedisTopics"]


class RedisTopics:
    """The ``backend="redis"`` topics on one Redis, as `RemoteBus` shows a broker's:
    ``stats()``, ``held_by()``, ``topic(name)``, ``dead_letters(name)``.

    Args:
        url: the Redis URL.
    """

    def __init__(self, url: str) -> None:
        from runtime.redis import Codec, Connection

        self._connection = Connection(url)
        self._codec = Codec()
        self._system: ActorSystem | None = None
        self._topics: dict[str, Any] = {}

    def __enter__(self) -> RedisTopics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Every topic's counters, by name."""
        from runtime.redis import topic_names

        return {name: self.topic(name).stats() for name in topic_names(self._connection)}

    def held_by(self) -> dict[str, str]:
        """For each topic whose publishers wait now: what holds them."""
        held = {name: self.topic(name).held_by() for name in self.stats()}
        return {name: text for name, text in held.items() if text is not None}

    def topic(self, name: str) -> Any:
        """A handle on topic ``name`` (attached with the settings Redis recorded).

        Raises:
            TopicNotFoundError: no such topic on this Redis.
        """
        from runtime.redis import RedisTopic, recorded_settings

        if name not in self._topics:
            settings = recorded_settings(self._connection, name)
            if self._system is None:
                self._system = ActorSystem("actorbus-cli")
            self._topics[name] = RedisTopic(
                name, settings, connection=self._connection, codec=self._codec,
                system=self._system, resolve=self.topic, declared=True)
        return self._topics[name]

    def dead_letters(self, name: str) -> Any:
        """Topic ``name``'s dead letters."""
        return self.topic(name).dead_letters

    def close(self) -> None:
        """Detach every handle (nothing in Redis changes) and close the connection."""
        for topic in self._topics.values():
            with contextlib.suppress(Exception):
                topic.close()
        if self._system is not None:
            self._system.shutdown()
        self._connection.close()
