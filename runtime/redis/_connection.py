"""The bus's Redis connection: one client, the registered scripts, typed failures."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from runtime.errors import BackendUnavailableError
from runtime.redis import _scripts

__all__ = ["Connection"]

CONNECT_TIMEOUT = 2.0
"""Seconds to wait for a TCP connection before the call fails (a Redis that is down)."""
SOCKET_TIMEOUT = 10.0
"""Seconds a command may take, blocking reads included (they block far less)."""


class Connection:
    """A Redis client for the bus's topics, made from a URL or given by the user.

    ``import redis`` happens here, when a bus first needs it.

    Args:
        source: a ``redis://`` URL, or a ``redis.Redis`` client.

    Raises:
        TypeError: ``source`` is neither.
    """

    def __init__(self, source: Any) -> None:
        import redis

        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
        if isinstance(source, str):
            client = redis.Redis.from_url(
                source, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT)
        elif isinstance(source, redis.Redis):
            client = source
            if client.connection_pool.connection_kwargs.get("decode_responses"):
                # Bodies are bytes: read through a client of the same server that keeps them.
                options = dict(client.connection_pool.connection_kwargs, decode_responses=False)
                client = redis.Redis(connection_pool=redis.ConnectionPool(**options))
        else:
            raise TypeError(f"redis= takes a URL or a redis.Redis, got {type(source).__qualname__}")
        self.client: Any = client
        self._owned = client is not source
        self.options: dict[str, Any] = dict(client.connection_pool.connection_kwargs)
        self.url = _url_of(self.options)
        self._scripts = {
            name: client.register_script(getattr(_scripts, name))
            for name in _scripts.__all__ if name != "BIG_IDLE"
        }

    def __repr__(self) -> str:
        return f"Connection({self.url})"

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Turn a connection failure inside the block into `BackendUnavailableError`."""
        try:
            yield
        except self._errors as exc:
            raise BackendUnavailableError(self.url, str(exc)) from exc

    def run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one of `runtime.redis._scripts` by name.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        with self.guard():
            return self._scripts[script](keys=keys, args=args)

    def script(self, name: str) -> Any:
        """The registered script ``name`` (callable with ``keys``, ``args``, ``client``)."""
        return self._scripts[name]

    def pipelined(self, script: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]],
                  ) -> list[Any]:
        """Run ``script`` once per ``(keys, args)`` in one round trip; the replies in order.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        with self.guard():
            pipe = self.client.pipeline(transaction=False)
            runner = self._scripts[script]
            for keys, args in calls:
                runner(keys=keys, args=args, client=pipe)
            return list(pipe.execute())

    def ping(self) -> None:
        """Check that Redis answers.

        Raises:
            BackendUnavailableError: it does not.
        """
        with self.guard():
            self.client.ping()

    def close(self) -> None:
        """Close the client's connections if this made the client (a given one stays open)."""
        if self._owned:
            self.client.close()


def _url_of(options: dict[str, Any]) -> str:
    """Where ``options`` connect to, as a URL without credentials."""
    if options.get("path"):
        return f"unix://{options['path']}"
    return f"redis://{options.get('host', 'localhost')}:{options.get('port', 6379)}/{options.get('db', 0)}"
