"""A real redis-server a test suite owns: started on a free loopback port, stopped by
its pid (the Redis backend's tests and the Spark bridge's Redis tests)."""

from __future__ import annotations

import select
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["REDIS_SERVER", "SKIP_REASON", "RedisServer"]

REDIS_SERVER = shutil.which("redis-server")
SKIP_REASON = "redis-server is not on PATH (install the Debian package redis-server)"


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
