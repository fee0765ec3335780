"""A real redis-server for the Redis backend's tests (`support.redis_server`), started
once per session on a free loopback port and stopped by its pid."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.redis_server import REDIS_SERVER, RedisServer
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


@pytest.fixture(params=["in_memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    """Runs a behaviour case on both backends."""
    if request.param == "redis" and REDIS_SERVER is None:
        pytest.skip(_SKIP)
    return str(request.param)


@pytest.fixture
def any_bus(backend: str, request: pytest.FixtureRequest) -> Iterator[Bus]:
    """A bus whose topics use ``backend`` by default."""
    from runtime import TopicSettings

    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        with Bus(redis=url, defaults=TopicSettings(backend="redis")) as bus:
            yield bus
    else:
        with Bus() as bus:
            yield bus
