"""Publisher -> Redis topic -> ``workers=2``, every ack tracked (``redis_pipeline``).

The candidate publishes ``count`` distinct 100-byte messages through a `Publisher` (default
batching) into a ``backend="redis"`` topic whose one group has two worker processes that
read, ack and track every message in Redis themselves; a round ends when the Publisher
flushed and ``topic.join`` saw nothing pending. The baseline is the raw redis-py ceiling on
the same server: one producer (100 XADDs per Lua call) and two consumer processes
(XREADGROUP COUNT 100, then XACK and a counter in one pipeline), a round ending when the
counter reached the count. Target 0.5.

The Redis is ``ACTORBUS_BENCH_REDIS`` (a URL) when set, else a ``redis-server`` this
scenario starts on a free loopback port without persistence; without either it is
skipped with the reason.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from runtime import Bus, Delivery

from ._harness import Comparison, Profile, Scenario, Skip
from ._measure import interleave, payloads, per_second

__all__ = ["SCENARIOS"]

TIMEOUT = 120.0
_BATCH = 100
_XADDS = """
for i = 1, #ARGV do redis.call('XADD', KEYS[1], '*', 'b', ARGV[i]) end
return #ARGV
"""


@contextmanager
def redis_url() -> Iterator[str]:
    """A Redis to measure on: ``ACTORBUS_BENCH_REDIS``, or a redis-server of our own.

    Raises:
        Skip: neither is available.
    """
    given = os.environ.get("ACTORBUS_BENCH_REDIS")
    if given:
        yield given
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise Skip("no Redis: set ACTORBUS_BENCH_REDIS or install redis-server")
    try:
        import redis
    except ImportError as exc:
        raise Skip("redis-py is not installed (extra 'redis')") from exc
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="actorbus-bench-redis-") as workdir:
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 10.0
            while True:
                try:
                    client.ping()
                    break
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    threading.Event().wait(0.02)
            client.close()
            yield url
        finally:
            server.terminate()
            server.wait(timeout=10)


def ignore(delivery: Delivery[Any]) -> None:
    """The workers' handler: nothing (``auto_ack`` acks on return)."""


def _run_ours(topic: Any, publisher: Any, messages: list[bytes]) -> None:
    before = topic.stats().delivered
    publish = publisher.publish
    for message in messages:
        publish(message)
    publisher.flush(TIMEOUT)
    if not topic.join(TIMEOUT):
        raise RuntimeError(f"{topic.name}: still pending after {TIMEOUT} s")
    delivered = topic.stats().delivered - before
    if delivered != len(messages):
        raise RuntimeError(f"{topic.name}: {delivered} of {len(messages)} messages were acked")


def raw_consumer(url: str, stream: str, group: str, counter: str, stop: Any) -> None:
    """One consumer process of the ceiling: XREADGROUP COUNT 100, XACK + count them."""
    import redis

    client: Any = redis.Redis.from_url(url)
    name = f"raw-{os.getpid()}"
    while not stop.is_set():
        reply = client.xreadgroup(group, name, {stream: ">"}, count=_BATCH, block=100)
        if not reply:
            continue
        ids = [entry_id for entry_id, _ in reply[0][1]]
        pipe = client.pipeline(transaction=False)
        pipe.xack(stream, group, *ids)
        pipe.incrby(counter, len(ids))
        pipe.execute()
    client.close()


class RawCeiling:
    """The raw redis-py pipeline: this process produces, two processes consume."""

    def __init__(self, url: str) -> None:
        import redis

        self._client: Any = redis.Redis.from_url(url)
        tag = uuid.uuid4().hex[:8]
        self._stream, self._counter, group = f"raw:{tag}", f"raw:{tag}:acked", "g"
        self._client.xgroup_create(self._stream, group, "$", mkstream=True)
        self._xadds = self._client.register_script(_XADDS)
        context = multiprocessing.get_context("forkserver")
        self._stop = context.Event()
        self._consumers = [context.Process(target=raw_consumer, daemon=True, args=(
            url, self._stream, group, self._counter, self._stop)) for _ in range(2)]
        for process in self._consumers:
            process.start()

    def run(self, messages: list[bytes]) -> None:
        target = int(self._client.get(self._counter) or 0) + len(messages)
        for start in range(0, len(messages), _BATCH):
            self._xadds(keys=[self._stream], args=messages[start:start + _BATCH])
        deadline = time.monotonic() + TIMEOUT
        pause = threading.Event()
        while int(self._client.get(self._counter) or 0) < target:
            if time.monotonic() > deadline:
                raise RuntimeError("the raw consumers did not ack everything in time")
            pause.wait(0.001)
        self._client.xtrim(self._stream, maxlen=0)

    def close(self) -> None:
        self._stop.set()
        for process in self._consumers:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        self._client.delete(self._stream, self._counter)
        self._client.close()


def measure(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second through the Redis topic vs the raw redis-py ceiling."""
    count = profile.count(100_000, minimum=500)
    messages = payloads(count)
    with redis_url() as url:
        raw = RawCeiling(url)
        try:
            with Bus(redis=url) as bus:
                name = f"bench-redis-{uuid.uuid4().hex[:8]}"
                topic: Any = bus.create_topic(name, backend="redis")
                topic.subscribe(ignore, group="workers", workers=2, auto_ack=True)
                publisher = topic.publisher()
                try:
                    medians = interleave({
                        "ours": lambda: per_second(count, partial(_run_ours, topic, publisher,
                                                                  messages)),
                        "raw": lambda: per_second(count, partial(raw.run, messages)),
                    }, repeats=profile.repeats)
                finally:
                    topic.destroy()
        finally:
            raw.close()
    return (Comparison(value=medians["ours"], baseline_value=medians["raw"]),)


SCENARIOS = (
    Scenario(name="redis_pipeline", unit="msg/s",
             baseline="raw redis-py: Lua XADD x100, 2 procs XREADGROUP 100 + XACK",
             target=0.5, measure=measure),
)
