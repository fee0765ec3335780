"""A real redis-server for the Redis backend's tests, started once per session on a free
loopback port and stopped by its pid; and a real 3-master Redis Cluster on loopback, also
once per session."""

from __future__ import annotations

import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Bus

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
_SKIP = "redis-server is not on PATH (install the Debian package redis-server)"
_SKIP_CLUSTER = ("redis-server and redis-cli are not both on PATH (install the Debian package "
                 "redis-server, which brings redis-tools)")


class RedisServer:
    """One redis-server process this suite owns.

    Args:
        workdir: its working directory (the AOF lives there when enabled).
        appendonly: run with ``--appendonly yes --appendfsync everysec``.
        cluster: run as a node of a Redis Cluster (its config file in ``workdir``).
    """

    def __init__(self, workdir: Path, *, appendonly: bool = False, cluster: bool = False) -> None:
        self.workdir = workdir
        self.appendonly = appendonly
        self.cluster = cluster
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
        # A node's cluster bus port is its own free port (the default, port + 10000, may
        # be past 65535 or taken).
        node = (["--cluster-enabled", "yes", "--cluster-port", str(_free_port()),
                 "--cluster-config-file", str(self.workdir / f"nodes-{self.port}.conf")]
                if self.cluster else [])
        # Its log goes to a pipe: the "Ready to accept connections" line is the readiness
        # signal. Little else is logged at this level until shutdown (no saves, no AOF
        # rewrites in a test; a cluster node's few lines as the cluster forms), so the
        # pipe never fills.
        self.process = process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *durability, *node, "--dir", str(self.workdir)],
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


class RedisClusterNodes:
    """A Redis Cluster of ``masters`` redis-server processes (no replicas) this suite owns.

    Args:
        workdir: where the nodes keep their cluster config files.
        masters: how many masters (the slots are spread evenly over them).
    """

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.nodes = [RedisServer(workdir, cluster=True) for _ in range(masters)]

    @property
    def url(self) -> str:
        """Its URL (``redis+cluster://`` and one node; the client finds the others)."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        """The masters' ports."""
        return [node.port for node in self.nodes]

    def start(self, timeout: float = 30.0) -> None:
        """Start the nodes, join them with ``redis-cli --cluster create``, and return once
        every node reports ``cluster_state:ok`` (up to ``timeout`` seconds)."""
        import redis

        assert REDIS_CLI is not None
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.start()
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            timeout=max(deadline - time.monotonic(), 1.0))
        clients = [redis.Redis(port=port, socket_timeout=5.0) for port in self.ports]
        pause = threading.Event()  # never set: the interval between looks at CLUSTER INFO
        try:
            while time.monotonic() < deadline:
                if all(client.execute_command("CLUSTER INFO").get("cluster_state") == "ok"
                       for client in clients):
                    return
                pause.wait(0.01)
        finally:
            for client in clients:
                client.close()
        raise RuntimeError(f"the Redis Cluster was not ok within {timeout} s")

    def stop(self) -> None:
        """Stop every node by its pid."""
        for node in self.nodes:
            node.stop()


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


@pytest.fixture(scope="session", autouse=True)
def _session_redis_cluster() -> Iterator[RedisClusterNodes | None]:
    """The session's 3-master Redis Cluster, started before any test of this folder (for
    the leak check, as `_session_redis`). None when redis-server or redis-cli is missing."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="actorbus-redis-cluster-") as workdir:
        cluster = RedisClusterNodes(Path(workdir))
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


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
    with tempfile.TemporaryDirectory(prefix="actorbus-redis-cluster-") as workdir:
        cluster = RedisClusterNodes(Path(workdir))
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


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
