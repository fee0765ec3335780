"""Measures the bridge on ``local[2]`` with distinct 100-byte payloads: rows/s and latency.

`measure_spark_throughput` times three runs, each from the call that starts Spark's work
to its end (query start-up included), after a small warm-up query:

- the source alone: topic -> ``actorbus`` source -> Spark's ``noop`` sink (``availableNow``);
- the sink alone: a cached ``DataFrame`` -> ``actorbus`` batch sink -> topic;
- the pipeline: topic -> source -> streaming sink -> topic (``availableNow``);

and the same three between in-memory Python data sources (``benchmarks._ceilings``:
an in-memory streaming source with the same schema and batch sizes, a discarding Arrow
writer), in the same session, right after the actorbus runs; three such repetitions,
medians reported. Every row's payload differs (`payload_of`). The benchmarks call it.

With a Redis (``ACTORBUS_BENCH_REDIS``, else a redis-server of its own, see
`benchmarks._redis_pipeline.redis_url`) each repetition also times the source and the
sink on a Redis topic (``option("redis", url)``): ``redis_source_`` (Redis topic ->
source -> ``noop``) and ``redis_sink_`` (the cached frame -> batch sink -> Redis topic);
and ``raw_redis_source_``: the same topic read by redis-py alone
(``benchmarks._ceilings``' ``raw_redis_ceiling``), in the same batches.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._ceilings import payload_of, register_ceiling
from runtime.core._message import Message

__all__ = ["measure_spark_throughput"]

_KEY_ENV = "ACTORBUS_BENCH_AUTHKEY"
_FILL = "x" * 88  # payload_of(i): 12 digits of i and this
_TIMEOUT = 600.0


def _session(master: str, workdir: Path) -> Any:
    from runtime.cli._spark_session import local_session

    return local_session(master, "actorbus-bench", workdir)


def _options(broker: dict[str, str], **extra: object) -> dict[str, str]:
    """``format("actorbus")`` options: the broker's (address, authkey_env) and ``extra``."""
    return broker | {k: str(v) for k, v in extra.items()}


def _read(spark: Any, broker: dict[str, str], source: str, batch: int) -> Any:
    """The streaming frame of topic ``source``'s group ``spark``."""
    return spark.readStream.format("actorbus").options(
        **_options(broker, topic=source, group="spark", max_messages_per_batch=batch)).load()


def _start(spark: Any, broker: dict[str, str], source: str, sink: str, checkpoint: Path,
           available_now: bool, batch: int) -> Any:
    frame = _read(spark, broker, source, batch)
    writer = (frame.select("payload", "key", "attributes").writeStream.format("actorbus")
              .options(**_options(broker, topic=sink)).option("checkpointLocation", str(checkpoint)))
    return writer.trigger(availableNow=True).start() if available_now else writer.start()


def _run_to_end(query: Any) -> None:
    """Wait for an ``availableNow`` query to finish (bounded), then stop it."""
    try:
        query.awaitTermination(_TIMEOUT)
    finally:
        query.stop()


def _source_topic(bus: Any, name: str, rows: int) -> Any:
    """Topic ``name`` holding ``rows`` messages for group ``spark``."""
    source = bus.create_topic(name, ack_timeout=None, balanced_capacity=rows + 1)
    source.create_group("spark")
    for start in range(0, rows, 10_000):
        count = min(10_000, rows - start)
        source._publish_batch([Message(data=payload_of(i)) for i in range(start, start + count)]
                              ).result(timeout=60)
    return source


def _sink_topic(bus: Any, name: str, rows: int) -> Any:
    """Topic ``name`` whose group ``sink`` keeps up to ``rows`` messages."""
    sink = bus.create_topic(name, ack_timeout=None, balanced_capacity=rows + 1)
    sink.create_group("sink")
    return sink


def _rate(rows: int, moved: int, seconds: float) -> dict[str, Any]:
    return {"rows": rows, "rows_out": moved, "seconds": round(seconds, 3),
            "rows_per_second": round(moved / seconds) if seconds else 0}


def _throughput(
    spark: Any, bus: Any, broker: dict[str, str], rows: int, workdir: Path, name: str
) -> dict[str, Any]:
    """The pipeline: topic -> source -> streaming sink -> topic."""
    source, sink = _source_topic(bus, f"{name}-in", rows), _sink_topic(bus, f"{name}-out", rows)
    began = time.perf_counter()
    _run_to_end(_start(spark, broker, source.name, sink.name, workdir / name, True,
                       batch=max(rows // 2, 1)))
    return _rate(rows, sink.stats().published, time.perf_counter() - began)


def _source_only(
    spark: Any, bus: Any, broker: dict[str, str], rows: int, workdir: Path,
    name: str = "source-in",
) -> dict[str, Any]:
    """The source: topic ``name`` -> source -> ``noop`` (every row read, then acked on commit)."""
    source = _source_topic(bus, name, rows)
    began = time.perf_counter()
    _run_to_end(_read(spark, broker, source.name, max(rows // 2, 1))
                .writeStream.format("noop").trigger(availableNow=True)
                .option("checkpointLocation", str(workdir / "source")).start())
    seconds = time.perf_counter() - began
    # Untimed: the last batch's ack reaches the counters through the topic's tracker, a
    # moment after the query ended (read at once, two full runs counted 835,872 and
    # 934,176 of 1,000,000 delivered). A run that ended early leaves them pending.
    source.join(_TIMEOUT)
    return _rate(rows, source.stats().delivered, seconds)


def _sink_only(
    spark: Any, bus: Any, broker: dict[str, str], rows: int, name: str = "sink-out",
) -> dict[str, Any]:
    """The sink: a cached ``DataFrame`` of ``rows`` payloads -> batch sink -> topic ``name``."""

    sink = _sink_topic(bus, name, rows)
    frame = _sink_frame(spark, rows)
    if frame.count() != rows:  # materialises the cache outside the timed part
        raise RuntimeError("the cached frame lost rows")
    began = time.perf_counter()
    frame.write.format("actorbus").options(**_options(broker, topic=sink.name)).mode(
        "append").save()
    seconds = time.perf_counter() - began
    frame.unpersist()
    return _rate(rows, sink.stats().published, seconds)


def _sink_frame(spark: Any, rows: int) -> Any:
    """A cached frame of ``rows`` distinct payloads (as `payload_of`), materialised."""
    from pyspark.sql import functions

    digits = functions.lpad(functions.col("id").cast("string"), 12, "0")
    frame = spark.range(rows, numPartitions=2).select(
        functions.concat(digits, functions.lit(_FILL)).cast("binary").alias("payload")).cache()
    if frame.count() != rows:  # materialises the cache outside the timed part
        raise RuntimeError("the cached frame lost rows")
    return frame


def _redis_source_topic(bus: Any, name: str, rows: int) -> Any:
    """Redis topic ``name`` of 2 partitions holding ``rows`` messages for group ``spark``."""
    source = bus.create_topic(name, backend="redis", ack_timeout=None, partitions=2)
    source.create_group("spark")
    publisher = source.publisher()
    for i in range(rows):
        publisher.publish(payload_of(i))
    publisher.flush(_TIMEOUT)
    return source


def _redis_source_only(spark: Any, bus: Any, url: str, rows: int, workdir: Path,
                       name: str) -> dict[str, Any]:
    """Redis topic ``name`` (2 partitions: one read task each) -> source -> ``noop``;
    the rows acked count as moved."""
    source = _redis_source_topic(bus, name, rows)
    began = time.perf_counter()
    _run_to_end(spark.readStream.format("actorbus").option("redis", url).option("topic", name)
                .option("group", "spark").option("max_messages_per_batch", max(rows // 2, 1))
                .load().writeStream.format("noop").trigger(availableNow=True)
                .option("checkpointLocation", str(workdir / name)).start())
    seconds = time.perf_counter() - began
    source.join(_TIMEOUT)  # untimed: the last batch is acked by the progress listener
    figures = _rate(rows, source.stats().delivered, seconds)
    source.destroy()
    return figures


def _raw_redis_source_only(spark: Any, bus: Any, url: str, rows: int, workdir: Path,
                           name: str) -> dict[str, Any]:
    """The same topic read by the raw redis-py source (``raw_redis_ceiling``) -> ``noop``,
    the same batches; the rows it read count as moved."""
    from runtime.redis._keys import TopicKeys

    source = _redis_source_topic(bus, name, rows)
    streams = ",".join(TopicKeys.of(name, p).stream for p in range(2))
    read = spark.readStream.format("raw_redis_ceiling").options(
        url=url, streams=streams, group="spark", rows=str(rows), batch=str(max(rows // 2, 1))).load()
    began = time.perf_counter()
    query = (read.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(workdir / name)).start())
    try:
        query.awaitTermination(_TIMEOUT)
        moved = sum(int(progress["numInputRows"]) for progress in query.recentProgress)
    finally:
        query.stop()
    seconds = time.perf_counter() - began
    source.destroy()
    return _rate(rows, moved, seconds)


def _redis_sink_only(spark: Any, bus: Any, url: str, rows: int, name: str) -> dict[str, Any]:
    """The cached frame -> batch sink -> Redis topic ``name``."""
    sink = bus.create_topic(name, backend="redis", ack_timeout=None)
    sink.create_group("sink")
    frame = _sink_frame(spark, rows)
    began = time.perf_counter()
    frame.write.format("actorbus").option("redis", url).option("topic", name).mode("append").save()
    seconds = time.perf_counter() - began
    frame.unpersist()
    figures = _rate(rows, sink.stats().published, seconds)
    sink.destroy()
    return figures


def _ceilings(spark: Any, rows: int, workdir: Path) -> dict[str, Any]:
    """The three runs between in-memory sources and sinks (``ceiling_`` figures)."""
    memory = {"rows": str(rows), "batch": str(max(rows // 2, 1))}
    began = time.perf_counter()
    _run_to_end(spark.readStream.format("memory_ceiling").options(**memory).load()
                .writeStream.format("noop").trigger(availableNow=True)
                .option("checkpointLocation", str(workdir / "ceiling-source")).start())
    source = _rate(rows, rows, time.perf_counter() - began)
    frame = _sink_frame(spark, rows)
    began = time.perf_counter()
    frame.write.format("memory_ceiling").mode("append").save()
    sink = _rate(rows, rows, time.perf_counter() - began)
    frame.unpersist()
    began = time.perf_counter()
    _run_to_end(spark.readStream.format("memory_ceiling").options(**memory).load()
                .select("payload", "key", "attributes").writeStream.format("memory_ceiling")
                .trigger(availableNow=True)
                .option("checkpointLocation", str(workdir / "ceiling-pipeline")).start())
    pipeline = _rate(rows, rows, time.perf_counter() - began)
    figures = {f"ceiling_source_{k}": v for k, v in source.items()}
    figures |= {f"ceiling_sink_{k}": v for k, v in sink.items()}
    return figures | {f"ceiling_{k}": v for k, v in pipeline.items()}


def _latency(
    spark: Any, bus: Any, broker: dict[str, str], workdir: Path, samples: int = 5
) -> dict[str, Any]:
    source = bus.create_topic("latency-in", ack_timeout=None)
    source.create_group("spark")
    sink = bus.create_topic("latency-out", ack_timeout=None)
    reader = sink.subscription(group="sink")
    query = _start(spark, broker, "latency-in", "latency-out", workdir / "latency", False, batch=100)
    timings = []
    try:
        for index in range(samples + 1):  # the first one warms the query up
            began = time.perf_counter()
            source._publish_batch([Message(data=payload_of(index))]).result(timeout=10)
            reader.receive(timeout=120).ack()
            if index:
                timings.append(time.perf_counter() - began)
    finally:
        query.stop()
        reader.unsubscribe()
    return {"latency_seconds_median": round(statistics.median(timings), 3),
            "latency_seconds_max": round(max(timings), 3), "latency_samples": samples}


def _repetition(
    spark: Any, bus: Any, broker: dict[str, str], rows: int, workdir: Path, number: int,
    redis: tuple[Any, str] | None,
) -> dict[str, Any]:
    """Our runs (broker, then Redis), then the three ceilings; the topics are removed
    afterwards."""
    source = _source_only(spark, bus, broker, rows, workdir, f"source-in-{number}")
    sink = _sink_only(spark, bus, broker, rows, f"sink-out-{number}")
    figures = _throughput(spark, bus, broker, rows, workdir, f"bench-{number}")
    figures |= {f"source_{k}": v for k, v in source.items()}
    figures |= {f"sink_{k}": v for k, v in sink.items()}
    if redis is not None:
        redis_bus, url = redis
        run = uuid.uuid4().hex[:8]
        redis_source = _redis_source_only(spark, redis_bus, url, rows, workdir, f"rsource-{run}")
        raw_source = _raw_redis_source_only(spark, redis_bus, url, rows, workdir, f"raw-{run}")
        redis_sink = _redis_sink_only(spark, redis_bus, url, rows, f"rsink-{run}")
        figures |= {f"redis_source_{k}": v for k, v in redis_source.items()}
        figures |= {f"raw_redis_source_{k}": v for k, v in raw_source.items()}
        figures |= {f"redis_sink_{k}": v for k, v in redis_sink.items()}
    figures |= _ceilings(spark, rows, workdir)
    for name in (f"source-in-{number}", f"sink-out-{number}", f"bench-{number}-in",
                 f"bench-{number}-out"):
        bus.remove_topic(name)
    return figures


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over ``runs``; ``rows_out`` is the fewest any run moved."""
    return {
        key: min(run[key] for run in runs) if key.endswith("rows_out")
        else statistics.median(run[key] for run in runs)
        for key in runs[0]
    }


def measure_spark_throughput(
    rows: int, *, master: str = "local[2]", authkey_env: str = _KEY_ENV, repeats: int = 3,
) -> dict[str, Any]:
    """Rows/s of the source, the sink and the pipeline, and one message's latency.

    Starts (or reuses) a SparkSession on ``master`` and a `Bus` served on loopback with
    the authkey in environment variable ``authkey_env`` (set to a random key if unset;
    Spark's Python workers must see it, so with a session that is already running it
    must have been set before the session started).
    Each figure is the median of ``repeats`` repetitions; a repetition runs ours, then
    the ceilings, so both sides see the same moments of a noisy host. Blocks for the
    whole run (about two minutes for a million rows on 2 cores, three repetitions).

    Returns:
        ``source_rows_per_second``, ``sink_rows_per_second`` and (the pipeline)
        ``rows_per_second`` with ``rows``, ``rows_out`` and ``seconds`` for each
        (``source_`` / ``sink_`` prefixed for the first two), and
        ``latency_seconds_median`` / ``latency_seconds_max`` (publish -> arrives in the
        output topic, default trigger).
    """
    from runtime import Bus
    from runtime.broker._server import serve
    from runtime.spark import register

    os.environ.setdefault(authkey_env, secrets.token_hex(16))
    with tempfile.TemporaryDirectory(prefix="actorbus-bench-") as directory:
        workdir = Path(directory)
        spark = _session(master, workdir)
        register(spark)
        register_ceiling(spark)
        with (Bus() as bus, serve(bus, authkey=os.environ[authkey_env].encode()) as server,
              contextlib.ExitStack() as redis_stack):
            host, port = server.address
            broker = {"address": f"{host}:{port}", "authkey_env": authkey_env}
            redis, missing = _redis(redis_stack)
            # The first query of a session pays for Python worker start-up, and the first
            # batch write for the driver's commit worker (~1 s): a small one of each first.
            _throughput(spark, bus, broker, 1000, workdir, "warmup")
            _sink_only(spark, bus, broker, 1000, "warmup-sink")
            if redis is not None:
                _redis_source_only(spark, redis[0], redis[1], 1000, workdir, "warmup-redis-source")
                _raw_redis_source_only(spark, redis[0], redis[1], 1000, workdir, "warmup-raw-source")
                _redis_sink_only(spark, redis[0], redis[1], 1000, "warmup-redis-sink")
            runs = [_repetition(spark, bus, broker, rows, workdir / f"run-{n}", n, redis)
                    for n in range(repeats)]
            result = _medians(runs) | {"repeats": repeats}
            result |= _latency(spark, bus, broker, workdir)
            if missing is not None:
                result["redis_missing"] = missing
    return result


def _redis(stack: contextlib.ExitStack) -> tuple[tuple[Any, str] | None, str | None]:
    """A bus on a Redis to measure on, held by ``stack``; else None and why not."""
    from benchmarks._harness import Skip
    from benchmarks._redis_pipeline import redis_url
    from runtime import Bus

    try:
        url = stack.enter_context(redis_url())
    except Skip as skip:
        return None, str(skip)
    return (stack.enter_context(Bus(redis=url)), url), None


if __name__ == "__main__":
    print(measure_spark_throughput(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000))
