"""The bus's Redis connection: one client (a single Redis or a Redis Cluster), the
registered scripts, typed failures.

Every command and script names keys of one partition (`TopicKeys`, one hash slot), so on a
cluster each goes to the master of that slot as it is, and a `Batch` is one round trip per
master it touches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from runtime.errors import BackendUnavailableError
from runtime.redis import _scripts

__all__ = ["Batch", "Connection", "Recipe", "node_url"]

CONNECT_TIMEOUT = 2.0
"""Seconds to wait for a TCP connection before the call fails (a Redis that is down)."""
SOCKET_TIMEOUT = 10.0
"""Seconds a command may take, blocking reads included (they block far less)."""

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The URL schemes of a Redis Cluster, and the scheme of one of its nodes."""

_PLAIN = (str, int, float, bool)


@dataclass(frozen=True, slots=True)
class Recipe:
    """What another process (a worker) builds the same connection from: plain options
    (retry policies, locks and credential providers stay with the parent's client).

    Attributes:
        options: the connection options.
        nodes: a cluster's masters as (host, port) when it was built; empty for a single
            Redis.
    """

    options: dict[str, Any] = field(default_factory=dict)
    nodes: tuple[tuple[str, int], ...] = ()


class Connection:
    """A Redis client for the bus's topics, made from a URL or given by the user.

    ``import redis`` happens here, when a bus first needs it.

    Args:
        source: a ``redis://`` / ``rediss://`` URL, a ``redis+cluster://`` /
            ``rediss+cluster://`` URL (any node of the cluster), a ``redis.Redis`` or a
            ``redis.cluster.RedisCluster`` client, or a `Recipe`.

    Raises:
        TypeError: ``source`` is none of these.
        BackendUnavailableError: a cluster did not answer (a cluster client asks it for
            its slots at once; a single Redis is first reached by the first command).
    """

    def __init__(self, source: Any) -> None:
        import redis
        from redis.cluster import RedisCluster

        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
            redis.exceptions.ClusterError, redis.exceptions.RedisClusterException)
        named = isinstance(source, str)
        self.url = _source_url(source)  # what a failure below names
        with self.guard():
            client = _client(source)
        self.client: Any = client
        self.cluster = isinstance(client, RedisCluster)
        self._owned = client is not source
        if not (named and self.cluster):
            self.url = _url_of(client, self.cluster)
        self._scripts = {
            name: client.register_script(getattr(_scripts, name))
            for name in _scripts.__all__ if name != "BIG_IDLE"
        }

    def __repr__(self) -> str:
        return f"Connection({self.url})"

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Turn a connection failure inside the block into `BackendUnavailableError`
        (a cluster that lost a master's slots or every node counts as one)."""
        try:
            yield
        except self._errors as exc:
            raise BackendUnavailableError(self.url, str(exc)) from exc

    def recipe(self) -> Recipe:
        """What a worker process connects with (`Connection(recipe)` there)."""
        if self.cluster:
            options = self.client.get_connection_kwargs()
            nodes = tuple((node.host, int(node.port)) for node in self.client.get_primaries())
        else:
            options, nodes = self.client.connection_pool.connection_kwargs, ()
        plain = {name: value for name, value in options.items()
                 if (value is None or isinstance(value, _PLAIN))
                 and not (nodes and name in ("host", "port"))}
        return Recipe(plain, nodes)

    def run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one of `runtime.redis._scripts` by name (on a cluster: on the master of
        its keys' slot).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        with self.guard():
            return self._scripts[script](keys=keys, args=args)

    def batch(self) -> Batch:
        """An empty `Batch` on this connection."""
        return Batch(self)

    def pipelined(self, script: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]],
                  ) -> list[Any]:
        """Run ``script`` once per ``(keys, args)`` in one `Batch`; the replies in order.

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        batch = self.batch()
        for keys, args in calls:
            batch.script(script, keys, args)
        return batch.execute()

    def sha(self, script: str) -> str:
        """The SHA1 that names ``script`` (one of `runtime.redis._scripts`) in Redis."""
        return str(self._scripts[script].sha)

    def load(self, scripts: Collection[str]) -> None:
        """Load ``scripts`` into Redis (on a cluster: into every master).

        Raises:
            BackendUnavailableError: Redis did not answer.
        """
        with self.guard():
            for name in scripts:
                self.client.script_load(getattr(_scripts, name))

    def plain_reader(self, key: str) -> Any:
        """A client of the Redis that holds ``key`` whose XPENDING, XRANGE and XREADGROUP
        replies come as Redis sends them (lists of bytes and integers), for bulk reads: redis-py
        makes a dict of each entry, which costs more than reading it. It shares this
        connection's pool (closing this connection closes it); on a cluster it stays on
        the master of ``key``'s slot, so a slot that moves fails its calls.

        Raises:
            BackendUnavailableError: a cluster has no master for ``key``'s slot.
        """
        import redis

        if self.cluster:
            with self.guard():
                node = self.client.get_redis_connection(self.client.get_node_from_key(key))
            pool = node.connection_pool
        else:
            pool = self.client.connection_pool
        reader = redis.Redis(connection_pool=pool)
        for command in ("XPENDING", "XRANGE", "XREADGROUP"):
            reader.set_response_callback(command, _as_sent)
        return reader

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


class Batch:
    """Script calls and commands sent together, each settled alone: one round trip to a
    single Redis; on a cluster, redis-py's cluster pipeline sends each to the master of its
    keys' slot (one round trip per master, written to all before reading any) and follows
    redirections.

    A master that does not hold a script yet (restarted, or a replica just promoted)
    answers NOSCRIPT without running it: those calls are sent again once it is loaded.

    Args:
        connection: the connection to send on.
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._pipe = connection.client.pipeline(transaction=False)
        self._calls: list[tuple[str, Sequence[str], Sequence[Any]] | None] = []

    def script(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue one call of script ``name``."""
        _queue_script(self._pipe, self._connection.sha(name), keys, args)
        self._calls.append((name, keys, args))

    def command(self, name: str, *args: Any, **options: Any) -> None:
        """Queue the client command ``name`` (a redis-py method, e.g. ``xreadgroup``)."""
        getattr(self._pipe, name)(*args, **options)
        self._calls.append(None)

    def execute(self) -> list[Any]:
        """Send everything queued; the replies in order.

        Raises:
            BackendUnavailableError: Redis did not answer.
            redis.exceptions.ResponseError: a call failed (the first such error).
        """
        import redis

        connection = self._connection
        with connection.guard():
            replies = list(self._pipe.execute(raise_on_error=False))
            missing = [i for i, reply in enumerate(replies)
                       if isinstance(reply, redis.exceptions.NoScriptError)]
            if missing:
                calls = [call for i in missing if (call := self._calls[i]) is not None]
                connection.load({name for name, _, _ in calls})
                again = connection.client.pipeline(transaction=False)
                for name, keys, args in calls:
                    _queue_script(again, connection.sha(name), keys, args)
                for i, reply in zip(missing, again.execute(raise_on_error=False), strict=True):
                    replies[i] = reply
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies


def _as_sent(reply: Any, **_: Any) -> Any:
    return reply


def _queue_script(pipe: Any, sha: str, keys: Sequence[str], args: Sequence[Any]) -> None:
    # redis-py's cluster pipeline refuses its `evalsha` method although it routes EVALSHA
    # by its keys like any keyed command (redis/redis-py#2914); the generic command sends
    # the same request, on a single Redis as on a cluster.
    pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)


def node_url(url: str) -> tuple[str, bool]:
    """The URL redis-py connects with for ``url``, and whether ``url`` names a Redis
    Cluster (a ``redis+cluster://`` URL names one of its nodes)."""
    scheme, _, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES:
        return f"{CLUSTER_SCHEMES[scheme]}://{rest}", True
    return url, False


def _client(source: Any) -> Any:
    """The client ``source`` names: built from a URL or a `Recipe`, or the given one
    (rebuilt when it decodes replies: bodies are bytes)."""
    import redis
    from redis.cluster import RedisCluster

    timeouts = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": SOCKET_TIMEOUT}
    if isinstance(source, str):
        url, cluster = node_url(source)
        if cluster:
            return RedisCluster.from_url(url, **timeouts)
        return redis.Redis.from_url(url, **timeouts)
    if isinstance(source, Recipe):
        if source.nodes:
            return _cluster(source.nodes, source.options)
        return redis.Redis(connection_pool=redis.ConnectionPool(**source.options))
    if isinstance(source, RedisCluster):
        given: Any = source
        options = given.get_connection_kwargs()
        if not options.get("decode_responses"):
            return source
        nodes = [(node.host, node.port) for node in given.get_primaries()]
        return _cluster(nodes, dict(options, decode_responses=False))
    if isinstance(source, redis.Redis):
        options = source.connection_pool.connection_kwargs
        if not options.get("decode_responses"):
            return source
        return redis.Redis(connection_pool=redis.ConnectionPool(
            **dict(options, decode_responses=False)))
    raise TypeError("redis= takes a URL, a redis.Redis or a redis.cluster.RedisCluster, got "
                    f"{type(source).__qualname__}")


def _cluster(nodes: Sequence[tuple[str, int]], options: dict[str, Any]) -> Any:
    """A cluster client that starts from ``nodes`` (the cluster's own hooks and the
    node-specific options left out of ``options``)."""
    from redis import cluster

    node: Any = cluster.ClusterNode
    kept = {name: value for name, value in options.items()
            if name not in ("redis_connect_func", "host", "port")}
    return cluster.RedisCluster(startup_nodes=[node(host, port) for host, port in nodes], **kept)


def _source_url(source: Any) -> str:
    """Where ``source`` points before any client is made (for an error)."""
    if isinstance(source, str):
        return _public_url(source)
    if isinstance(source, Recipe) and source.nodes:
        host, port = source.nodes[0]
        return f"redis+cluster://{host}:{port}"
    return "redis"


def _public_url(url: str) -> str:
    """``url`` without credentials or options."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return url.rpartition("@")[2]
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _url_of(client: Any, cluster: bool) -> str:
    """Where ``client`` connects to, as a URL without credentials."""
    if cluster:
        node = client.get_default_node()
        return f"redis+cluster://{node.host}:{node.port}"
    options = client.connection_pool.connection_kwargs
    if options.get("path"):
        return f"unix://{options['path']}"
    return f"redis://{options.get('host', 'localhost')}:{options.get('port', 6379)}/{options.get('db', 0)}"
