"""Publisher -> Redis topic -> ``workers=2``, every ack tracked (``redis_pipeline``).

The candidate publishes ``count`` distinct 100-byte messages through a `Publisher` (default
batching) into a ``backend="redis"`` topic whose one group has two worker processes that
read, ack and track every message in Redis themselves; a round ends when the Publisher
flushed and ``topic.join`` saw nothing pending. The baseline is the raw redis-py ceiling on
the same server: one producer (100 XADDs per Lua call) and two consumer processes
(XREADGROUP COUNT 100, then XACK and a counter in one pipeline), a round ending when the
counter reached the count. Target 0.5. The extra row ``redis_pipeline/dramatiq`` (when
dramatiq is installed: extra ``bench``) compares with dramatiq's RedisBroker on
the same server: this process sends, two worker processes (8 threads each) run a no-op
actor that counts in Redis; it gets a twentieth of the messages. Target 20.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from runtime import Bus, Delivery

from ._harness import Comparison, Profile, Scenario, Skip
from ._measure import interleave, payloads, per_second

__all__ = ["SCENARIOS", "TIMEOUT", "RawCeiling", "redis_url", "run_ours"]

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


def run_ours(topic: Any, publisher: Any, messages: list[bytes], keys: int = 0) -> None:
    """Publish ``messages`` (over ``keys`` ordering keys, or none), flush, and wait until
    every one is acked.

    Raises:
        RuntimeError: messages are still pending after `TIMEOUT`, or not all were acked.
    """
    before = topic.stats().delivered
    publish = publisher.publish
    if keys:
        for number, message in enumerate(messages):
            publish(message, ordering_key=f"key-{number % keys}")
    else:
        for message in messages:
            publish(message)
    publisher.flush(TIMEOUT)
    if not topic.join(TIMEOUT):
        raise RuntimeError(f"{topic.name}: still pending after {TIMEOUT} s")
    delivered = topic.stats().delivered - before
    if delivered != len(messages):
        raise RuntimeError(f"{topic.name}: {delivered} of {len(messages)} messages were acked")


def raw_consumer(url: str, stream: str, group: str, counter: str, stop: Any,
                 work: Callable[[bytes], Any] | None = None) -> None:
    """One consumer process of the ceiling: XREADGROUP COUNT 100, ``work`` on each body
    (when given), then XACK + count them."""
    import redis

    client: Any = redis.Redis.from_url(url)
    name = f"raw-{os.getpid()}"
    while not stop.is_set():
        reply = client.xreadgroup(group, name, {stream: ">"}, count=_BATCH, block=100)
        if not reply:
            continue
        entries = reply[0][1]
        if work is not None:
            for _, fields in entries:
                work(fields[b"b"])
        ids = [entry_id for entry_id, _ in entries]
        pipe = client.pipeline(transaction=False)
        pipe.xack(stream, group, *ids)
        pipe.incrby(counter, len(ids))
        pipe.execute()
    client.close()


class RawCeiling:
    """The raw redis-py pipeline: this process produces, two processes consume (running
    ``work`` on each message, when given)."""

    def __init__(self, url: str, work: Callable[[bytes], Any] | None = None) -> None:
        import redis

        self._client: Any = redis.Redis.from_url(url)
        tag = uuid.uuid4().hex[:8]
        self._stream, self._counter, group = f"raw:{tag}", f"raw:{tag}:acked", "g"
        self._client.xgroup_create(self._stream, group, "$", mkstream=True)
        self._xadds = self._client.register_script(_XADDS)
        context = multiprocessing.get_context("forkserver")
        self._stop = context.Event()
        self._consumers = [context.Process(target=raw_consumer, daemon=True, args=(
            url, self._stream, group, self._counter, self._stop, work)) for _ in range(2)]
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


_DRAMATIQ_SHARE = 20  # dramatiq moves ~1/50 of our rate: it gets 1/20 of the messages


def _dramatiq_broker(url: str, counter: str) -> tuple[Any, Any]:
    """A RedisBroker and the trivial actor (it counts what it ran in ``counter``)."""
    import dramatiq
    import redis
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=url, namespace=f"bench-{counter}")  # type: ignore[no-untyped-call]
    client = redis.Redis.from_url(url)

    def noop(payload: str) -> None:
        client.incr(counter)

    actor = dramatiq.actor(broker=broker, actor_name="bench_noop", queue_name="bench")(noop)
    return broker, actor


def dramatiq_worker(url: str, counter: str, stop: Any) -> None:
    """One dramatiq worker process (8 threads, its default) running the trivial actor."""
    from dramatiq import Worker

    broker, _ = _dramatiq_broker(url, counter)
    worker = Worker(broker, worker_threads=8)
    worker.start()
    stop.wait()
    worker.stop()
    broker.close()


class Dramatiq:
    """dramatiq's RedisBroker on the same server: this process sends, two worker
    processes run a trivial actor."""

    def __init__(self, url: str) -> None:
        import redis

        self._counter = f"dramatiq:{uuid.uuid4().hex[:8]}:done"
        self._client: Any = redis.Redis.from_url(url)
        self._broker, self._actor = _dramatiq_broker(url, self._counter)
        context = multiprocessing.get_context("forkserver")
        self._stop = context.Event()
        self._workers = [context.Process(target=dramatiq_worker, daemon=True,
                                         args=(url, self._counter, self._stop))
                         for _ in range(2)]
        for process in self._workers:
            process.start()

    def run(self, messages: list[bytes]) -> None:
        target = int(self._client.get(self._counter) or 0) + len(messages)
        send = self._actor.send
        for message in messages:
            send(message.decode())
        deadline = time.monotonic() + TIMEOUT
        pause = threading.Event()
        while int(self._client.get(self._counter) or 0) < target:
            if time.monotonic() > deadline:
                raise RuntimeError("dramatiq did not run everything in time")
            pause.wait(0.002)

    def close(self) -> None:
        self._stop.set()
        for process in self._workers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        self._broker.close()
        self._client.delete(self._counter)
        self._client.close()


@contextmanager
def _dramatiq(url: str) -> Iterator[Dramatiq | None]:
    """The dramatiq baseline, or None when dramatiq is not installed (a bench-only
    dependency)."""
    try:
        import dramatiq  # noqa: F401
    except ImportError:
        yield None
        return
    baseline = Dramatiq(url)
    try:
        yield baseline
    finally:
        baseline.close()


def measure(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second through the Redis topic vs the raw redis-py ceiling (and vs
    dramatiq's RedisBroker when it is installed)."""
    count = profile.count(100_000, minimum=500)
    messages = payloads(count)
    few = messages[:max(count // _DRAMATIQ_SHARE, 100)]
    with redis_url() as url, _dramatiq(url) as dramatiq:
        raw = RawCeiling(url)
        try:
            with Bus(redis=url) as bus:
                name = f"bench-redis-{uuid.uuid4().hex[:8]}"
                topic: Any = bus.create_topic(name, backend="redis")
                topic.subscribe(ignore, group="workers", workers=2, auto_ack=True)
                publisher = topic.publisher()
                sides = {
                    "ours": lambda: per_second(count, partial(run_ours, topic, publisher,
                                                              messages)),
                    "raw": lambda: per_second(count, partial(raw.run, messages)),
                }
                if dramatiq is not None:
                    sides["dramatiq"] = lambda: per_second(len(few), partial(dramatiq.run, few))
                try:
                    medians = interleave(sides, repeats=profile.repeats)
                finally:
                    topic.destroy()
        finally:
            raw.close()
    rows = [Comparison(value=medians["ours"], baseline_value=medians["raw"])]
    if "dramatiq" in medians:
        rows.append(Comparison(value=medians["ours"], baseline_value=medians["dramatiq"],
                               suffix="dramatiq", target=20.0,
                               baseline="dramatiq RedisBroker, 2 worker processes, no-op actor"))
    return tuple(rows)


SCENARIOS = (
    Scenario(name="redis_pipeline", unit="msg/s",
             baseline="raw redis-py: Lua XADD x100, 2 procs XREADGROUP 100 + XACK",
             target=0.5, measure=measure),
)
