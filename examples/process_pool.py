"""Fan CPU-bound work out over every core with a pool of process actors.

Each member is an actor in its own OS process; `least_busy` routing sends each
job to the member with the fewest jobs in flight. SIGKILL one member mid-run: the
pool replaces it, and only the jobs that member held fail (with WorkerCrashedError).
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections import Counter
from typing import Any

from actors import Actor, ActorSystem
from actors.errors import WorkerCrashedError


class Hasher(Actor):
    def on_receive(self, message: Any) -> Any:
        digest = str(message).encode()
        for _ in range(5_000):
            digest = hashlib.sha256(digest).digest()
        return os.getpid()


def main() -> None:
    workers = os.cpu_count() or 2
    with ActorSystem("fan-out") as system:
        pool = system.pool(Hasher, size=workers, router="least_busy")
        futures = [pool.ask(n, timeout=60) for n in range(400)]
        victim = system.status()[pool.members()[0].name].pid
        os.kill(victim, signal.SIGKILL)  # mid-run: its queued jobs are lost, the rest carry on
        done = Counter()
        for future in futures:
            error = future.exception(timeout=60)
            done["crashed" if isinstance(error, WorkerCrashedError) else "ok"] += 1
        print(f"{workers} workers: {done['ok']} jobs done, {done['crashed']} lost with the killed worker")
        print("after the kill the pool still serves:", pool.ask("again").result(timeout=10) != victim)
        assert done["ok"] + done["crashed"] == 400


if __name__ == "__main__":
    main()
