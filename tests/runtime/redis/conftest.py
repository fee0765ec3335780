"""A real redis-server for the Redis backend's tests, started once per session on a free
loopback port and stopped by its pid; and a real 3-master Redis Cluster on loopback, also
once per session (both from `support.redis_server`)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.redis_server import (
    REDIS_CLI,
    REDIS_SERVER,
    RedisClusterNodes,
    RedisServer,
    started_cluster,
)
from support.redis_server import SKIP_CLUSTER_REASON as _SKIP_CLUSTER
from support.redis_server import SKIP_REASON as _SKIP

from runtime import Bus


@pytest.fixture(scope="session", autouse=True)
def _session_redis() -> Iterator[RedisServer | None]:
    """The session's redis-server, started before any test of this folder so that the
    suite's leak check (which snapshots child processes per test) counts it as existing.
    None when redis-server is not installed."""
    if REDIS_SERVER is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="actorbus-redis-") as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        yield server
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _session_redis_cluster() -> Iterator[RedisClusterNodes | None]:
    """The session's 3-master Redis Cluster, started before any test of this folder (for
    the leak check, as `_session_redis`). None when redis-server or redis-cli is missing."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        yield None
        return
    with started_cluster() as cluster:
        yield cluster


@pytest.fixture
def redis_cluster(_session_redis_cluster: RedisClusterNodes | None) -> RedisClusterNodes:
    """The session's Redis Cluster (3 masters, no replicas, shared by the session)."""
    if _session_redis_cluster is None:
        pytest.skip(_SKIP_CLUSTER)
    return _session_redis_cluster


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisClusterNodes) -> str:
    """The session cluster's ``redis+cluster://`` URL."""
    return redis_cluster.url


@pytest.fixture
def own_redis_cluster() -> Iterator[RedisClusterNodes]:
    """A 3-master Redis Cluster of its own, for a test that kills one of its masters."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        pytest.skip(_SKIP_CLUSTER)
    with started_cluster() as cluster:
        yield cluster


@pytest.fixture
def redis_server(_session_redis: RedisServer | None) -> RedisServer:
    """A redis-server without persistence (the fast default), shared by the session."""
    if _session_redis is None:
        pytest.skip(_SKIP)
    return _session_redis


@pytest.fixture
def durable_redis() -> Iterator[RedisServer]:
    """A redis-server of its own with ``appendonly yes``/``appendfsync everysec``, for a
    test that kills and restarts it."""
    if REDIS_SERVER is None:
        pytest.skip(_SKIP)
    with tempfile.TemporaryDirectory(prefix="actorbus-redis-aof-") as workdir:
        server = RedisServer(Path(workdir), appendonly=True)
        server.start()
        yield server
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL."""
    return redis_server.url


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses (the server is shared)."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_bus(redis_url: str) -> Iterator[Bus]:
    """A bus on the session's Redis."""
    with Bus(redis=redis_url) as bus:
        yield bus


@pytest.fixture(params=["in_memory", "redis", "redis_cluster"])
def backend(request: pytest.FixtureRequest) -> str:
    """Runs a behaviour case on both backends (Redis: a single server and a cluster)."""
    if request.param == "redis" and REDIS_SERVER is None:
        pytest.skip(_SKIP)
    if request.param == "redis_cluster" and (REDIS_SERVER is None or REDIS_CLI is None):
        pytest.skip(_SKIP_CLUSTER)
    return str(request.param)


@pytest.fixture
def any_bus(backend: str, request: pytest.FixtureRequest) -> Iterator[Bus]:
    """A bus whose topics use ``backend`` by default."""
    from runtime import TopicSettings

    if backend != "in_memory":
        url = request.getfixturevalue("redis_url" if backend == "redis" else "redis_cluster_url")
        with Bus(redis=url, defaults=TopicSettings(backend="redis")) as bus:
            yield bus
    else:
        with Bus() as bus:
            yield bus
