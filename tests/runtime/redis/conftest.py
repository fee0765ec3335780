"""A real redis-server for the Redis backend's tests, started once per session on a free
loopback port and stopped by its pid."""

from __future__ import annotations

import select
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Bus

REDIS_SERVER = shutil.which("redis-server")
_SKIP = "redis-server is not on PATH (install the Debian package redis-server)"


class RedisServer:
    """One redis-server process this suite owns.

    Args:
        workdir: its working directory (the AOF lives there when enabled).
        appendonly: run with ``--appendonly yes --appendfsync everysec``.
    """

    def __init__(self, workdir: Path, *, appendonly: bool = False) -> None:
        self.workdir = workdir
        self.appendonly = appendonly
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its URL, database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it says it accepts connections (up to 10 s)."""
        assert REDIS_SERVER is not None
        durability = (["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly
                      else ["--appendonly", "no"])
        # Its log goes to a pipe: the "Ready to accept connections" line is the readiness
        # signal. Nothing else is logged at this level until shutdown (no saves, no AOF
        # rewrites in a test), so the pipe never fills.
        self.process = process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *durability, "--dir", str(self.workdir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)  # unbuffered: select sees every line
        assert process.stdout is not None
        deadline = time.monotonic() + 10.0
        while (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([process.stdout], [], [], remaining)
            if not readable:
                break
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"redis-server exited with {process.wait(timeout=10)}")
            if b"Ready to accept connections" in line:
                return
        raise RuntimeError("redis-server was not ready within 10 s")

    def kill(self) -> None:
        """SIGKILL it (a crash: no final fsync) and reap it."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self._close_log()

    def _close_log(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        self.process.stdout.close()
        self.process = None

    def stop(self) -> None:
        """Terminate it by its pid and reap it."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self._close_log()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
