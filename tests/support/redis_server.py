"""A real redis-server a test suite owns, started on a free loopback port and stopped by
its pid, and a real Redis Cluster of such servers (the Redis backend's tests and the Spark
bridge's Redis tests)."""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["REDIS_CLI", "REDIS_SERVER", "SKIP_CLUSTER_REASON", "SKIP_REASON", "RedisClusterNodes",
           "RedisServer", "started_cluster"]

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
SKIP_REASON = "redis-server is not on PATH (install the Debian package redis-server)"
SKIP_CLUSTER_REASON = ("redis-server and redis-cli are not both on PATH (install the Debian "
                       "package redis-server, which brings redis-tools)")


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


@contextlib.contextmanager
def started_cluster() -> Iterator[RedisClusterNodes]:
    """A 3-master Redis Cluster in a temporary directory, stopped by its pids on exit."""
    with tempfile.TemporaryDirectory(prefix="actorbus-redis-cluster-") as workdir:
        cluster = RedisClusterNodes(Path(workdir))
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
