"""Measures the bridge: rows/s topic -> Spark source -> Spark sink -> topic, and latency.

`measure_spark_throughput` runs on ``local[2]`` (or the active session) with 100-byte
payloads and Arrow on both sides; the benchmarks call it.
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime._message import Message

__all__ = ["measure_spark_throughput"]

_KEY_ENV = "ACTORBUS_BENCH_AUTHKEY"
_PAYLOAD = b"x" * 100
_TIMEOUT = 600.0


def _session(master: str, workdir: Path) -> Any:
    from runtime._spark_session import local_session

    return local_session(master, "actorbus-bench", workdir)


def _options(address: tuple[str, int], **extra: object) -> dict[str, str]:
    base = {"address": f"{address[0]}:{address[1]}", "authkey_env": _KEY_ENV}
    return base | {k: str(v) for k, v in extra.items()}


def _start(spark: Any, address: tuple[str, int], source: str, sink: str, checkpoint: Path,
           available_now: bool, batch: int) -> Any:
    frame = spark.readStream.format("actorbus").options(
        **_options(address, topic=source, group="spark", max_messages_per_batch=batch)).load()
    writer = (frame.select("payload", "key", "attributes").writeStream.format("actorbus")
              .options(**_options(address, topic=sink)).option("checkpointLocation", str(checkpoint)))
    return writer.trigger(availableNow=True).start() if available_now else writer.start()


def _throughput(
    spark: Any, bus: Any, address: tuple[str, int], rows: int, workdir: Path, name: str
) -> dict[str, Any]:
    source = bus.create_topic(f"{name}-in", ack_timeout=None, balanced_capacity=rows + 1)
    source.create_group("spark")
    sink = bus.create_topic(f"{name}-out", ack_timeout=None, balanced_capacity=rows + 1)
    sink.create_group("sink")
    for start in range(0, rows, 10_000):
        count = min(10_000, rows - start)
        source._publish_batch([Message(data=_PAYLOAD)] * count).result(timeout=60)
    began = time.perf_counter()
    query = _start(spark, address, source.name, sink.name, workdir / name, True,
                   batch=max(rows // 2, 1))
    try:
        query.awaitTermination(_TIMEOUT)
    finally:
        query.stop()
    seconds = time.perf_counter() - began
    out = sink.stats().published
    return {"rows": rows, "rows_out": out, "seconds": round(seconds, 3),
            "rows_per_second": round(out / seconds) if seconds else 0.0}


def _latency(
    spark: Any, bus: Any, address: tuple[str, int], workdir: Path, samples: int = 5
) -> dict[str, Any]:
    source = bus.create_topic("latency-in", ack_timeout=None)
    source.create_group("spark")
    sink = bus.create_topic("latency-out", ack_timeout=None)
    reader = sink.subscription(group="sink")
    query = _start(spark, address, "latency-in", "latency-out", workdir / "latency", False, batch=100)
    timings = []
    try:
        for index in range(samples + 1):  # the first one warms the query up
            began = time.perf_counter()
            source._publish_batch([Message(data=_PAYLOAD)]).result(timeout=10)
            reader.receive(timeout=120).ack()
            if index:
                timings.append(time.perf_counter() - began)
    finally:
        query.stop()
        reader.unsubscribe()
    return {"latency_seconds_median": round(statistics.median(timings), 3),
            "latency_seconds_max": round(max(timings), 3), "latency_samples": samples}


def measure_spark_throughput(rows: int, *, master: str = "local[2]") -> dict[str, Any]:
    """Rows/s through topic -> Spark source -> Spark sink -> topic, and one message's latency.

    Starts (or reuses) a SparkSession on ``master`` and a `Bus` served on loopback.
    Blocks for the whole run (about a minute for a million rows on 2 cores).

    Returns:
        ``rows``, ``rows_out``, ``seconds``, ``rows_per_second`` (availableNow run, batches
        of rows/2, 100-byte payloads, Arrow on both sides) and ``latency_seconds_median`` /
        ``latency_seconds_max`` (publish -> arrives in the output topic, default trigger).
    """
    from runtime import Bus
    from runtime._server import serve
    from runtime.spark import register

    os.environ.setdefault(_KEY_ENV, secrets.token_hex(16))
    with tempfile.TemporaryDirectory(prefix="actorbus-bench-") as directory:
        workdir = Path(directory)
        spark = _session(master, workdir)
        register(spark)
        with Bus() as bus, serve(bus, authkey=os.environ[_KEY_ENV].encode()) as server:
            # The first query of a session pays for Python worker start-up: a small one first.
            _throughput(spark, bus, server.address, 1000, workdir, "warmup")
            result = _throughput(spark, bus, server.address, rows, workdir, "bench")
            result |= _latency(spark, bus, server.address, workdir)
    return result


if __name__ == "__main__":
    print(measure_spark_throughput(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000))
