"""The Spark bridge on a real local[2] session and the real broker (one session per module)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.spark import KEY_ENV, authkey, drain, needs_spark, options, publish, spark_session

from runtime import Bus, Message
from runtime.broker._client import Channel
from runtime.broker._server import BusServer, serve

pytestmark = [*needs_spark, pytest.mark.timeout(300)]

RUN_TIMEOUT = 120
_names = itertools.count(1)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session("local[2]")


@pytest.fixture(scope="module")
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        yield bus


@pytest.fixture(scope="module")
def server(bus: Bus, spark: Any) -> Iterator[BusServer]:
    from runtime.spark import register

    register(spark)
    with serve(bus, authkey=authkey()) as server:
        yield server


@pytest.fixture
def make_topic(bus: Bus) -> Iterator[Any]:
    """Creates fresh topics (with one group) and removes them after the test."""
    names: list[str] = []

    def make(prefix: str, group: str, **settings: Any) -> Any:
        name = f"{prefix}-{next(_names)}"
        topic = bus.create_topic(name, ack_timeout=None, **settings)
        topic.create_group(group)
        names.append(name)
        return topic

    yield make
    for name in names:
        bus.remove_topic(name)


@pytest.fixture
def topic_pair(make_topic: Any) -> Any:
    """A fresh input topic (group "spark") and output topic (group "check")."""
    return lambda **settings: (make_topic("in", "spark", **settings), make_topic("out", "check"))



def stream(spark: Any, server: BusServer, source: Any, sink: Any, checkpoint: Path,
           transform: Any = None, **source_options: Any) -> Any:
    """Start source -> transform -> sink with availableNow; returns the query."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("actorbus").options(**options(
        server.address, topic=source.name, group="spark", **source_options))
    frame = reader.load()
    payload = F.upper(F.col("payload").cast("string")) if transform is None else transform(F.col("payload"))
    out = frame.select(payload.alias("payload"), "key", "attributes")
    return (out.writeStream.format("actorbus").options(**options(server.address, topic=sink.name))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def run(query: Any) -> None:
    try:
        assert query.awaitTermination(RUN_TIMEOUT), "the query did not finish in time"
    finally:
        query.stop()


def lease_position(server: BusServer, topic: str, consumer: str = "spark") -> int:
    with Channel(server.address, authkey()) as channel:
        return int(channel.call("lease_position", topic, "spark", consumer, 60.0))


def test_round_trip_transforms_every_message_once_and_acks_all(
    spark: Any, server: BusServer, topic_pair: Any, tmp_path: Path
) -> None:
    source, sink = topic_pair()
    publish(source, [f"m{i}".encode() for i in range(50)])

    run(stream(spark, server, source, sink, tmp_path / "ck", max_messages_per_batch=20))

    out = drain(sink)
    assert sorted(m.data for m in out) == sorted(f"M{i}".encode() for i in range(50))
    assert all(isinstance(m, Message) and m.attributes.get("n") for m in out)
    assert source.join(timeout=10)
    assert source.stats().delivered == 50
    assert lease_position(server, source.name) == 50


def test_restart_from_the_same_checkpoint_publishes_no_duplicates(
    spark: Any, server: BusServer, topic_pair: Any, tmp_path: Path
) -> None:
    source, sink = topic_pair()
    publish(source, [f"a{i}".encode() for i in range(30)])
    run(stream(spark, server, source, sink, tmp_path / "ck", max_messages_per_batch=20))
    publish(source, [f"b{i}".encode() for i in range(10)])

    run(stream(spark, server, source, sink, tmp_path / "ck", max_messages_per_batch=20))

    out = sorted(m.data for m in drain(sink))
    assert out == sorted([f"A{i}".encode() for i in range(30)] + [f"B{i}".encode() for i in range(10)])
    assert source.join(timeout=10)
    assert source.stats().delivered == 40


def poison_udf(poisoned: bool) -> Any:
    from pyspark.sql import functions as F

    def upper(payload: bytes) -> bytes:
        if poisoned and payload == b"poison":
            raise ValueError("poison row")
        return payload.upper()

    return lambda column: F.udf(upper, "binary", useArrow=False)(column)


def test_poison_row_fails_the_query_and_its_batch_replays_after_the_fix(
    spark: Any, server: BusServer, topic_pair: Any, tmp_path: Path
) -> None:
    source, sink = topic_pair()
    payloads = [f"m{i}".encode() for i in range(30)]
    payloads[15] = b"poison"  # in the second batch of 10
    publish(source, payloads)

    failed = stream(spark, server, source, sink, tmp_path / "ck", poison_udf(True),
                    max_messages_per_batch=10)
    with pytest.raises(Exception, match="poison row"):
        run(failed)
    first_batch = sorted(m.data for m in drain(sink))
    position = lease_position(server, source.name)
    run(stream(spark, server, source, sink, tmp_path / "ck", poison_udf(False),
               max_messages_per_batch=10))

    assert first_batch == sorted(p.upper() for p in payloads[:10])
    assert position == 10
    assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in payloads[10:])
    assert source.join(timeout=10)
    assert source.stats().delivered == 30


def test_expired_leases_return_to_the_group_with_attempt_two(
    spark: Any, server: BusServer, topic_pair: Any, tmp_path: Path
) -> None:
    source, sink = topic_pair(max_delivery_attempts=3)
    payloads = [f"m{i}".encode() for i in range(20)]
    payloads[12] = b"poison"
    publish(source, payloads)
    failed = stream(spark, server, source, sink, tmp_path / "ck", poison_udf(True),
                    max_messages_per_batch=10, consumer="dies", lease_seconds=1)
    with pytest.raises(Exception, match="poison row"):
        run(failed)

    member = source.subscription(group="spark")
    returned = [member.receive(timeout=30) for _ in range(10)]

    assert sorted(d.message.data for d in returned) == sorted(payloads[10:])
    assert {d.attempt for d in returned} == {2}
    for delivery in returned:
        delivery.ack()
    member.unsubscribe()
    assert source.join(timeout=10)
    assert source.stats().delivered == 20


def test_handler_pool_acks_returns_and_dead_letters_raises(
    spark: Any, bus: Bus, make_topic: Any
) -> None:
    from runtime.spark import SparkHandlerPool

    topic = make_topic("work", "workers")
    for i in range(20):
        topic.publish(i)

    def handler(number: int) -> None:
        if number % 5 == 0:
            raise ValueError(f"bad number {number}")

    handled = SparkHandlerPool(spark, bus, topic=topic.name, group="workers", chunk_size=8).run(
        handler, max_messages=20, idle_timeout=10)

    assert handled == 20
    assert topic.join(timeout=10)
    letters = sorted(topic.dead_letters, key=lambda dl: dl.message)
    assert [(dl.message, dl.reason, dl.error) for dl in letters] == [
        (n, "error", f"bad number {n}") for n in (0, 5, 10, 15)]
    topic._sync()
    assert topic.stats().delivered == 16


def test_batch_write_publishes_once_per_batch_id(
    spark: Any, server: BusServer, make_topic: Any
) -> None:
    topic = make_topic("batch", "check", balanced_capacity=20_000)
    frame = spark.range(10_000).selectExpr(
        "cast(id as string) as payload", "concat('k', cast(id % 7 as string)) as key")
    write = options(server.address, topic=topic.name, producer_id="loader", batch_id="2024-01-01")

    frame.write.format("actorbus").mode("append").options(**write).save()
    frame.write.format("actorbus").mode("append").options(**write).save()

    assert topic.stats().published == 10_000
    out = drain(topic)
    assert sorted(int(m.data) for m in out) == list(range(10_000))


def test_error_column_routes_rows_to_dead_letters(
    spark: Any, server: BusServer, make_topic: Any
) -> None:
    topic = make_topic("errors", "check")
    frame = spark.createDataFrame(
        [(b"ok-1", None), (b"bad", "unparseable"), (b"ok-2", None)], "payload binary, problem string")

    frame.write.format("actorbus").mode("append").options(
        **options(server.address, topic=topic.name, error_column="problem")).save()

    assert sorted(m.data for m in drain(topic)) == [b"ok-1", b"ok-2"]
    letters = list(topic.dead_letters)
    assert [(dl.reason, dl.error, dl.message.data) for dl in letters] == [("error", "unparseable", b"bad")]


def test_the_throughput_measurement_moves_every_row_of_each_run(spark: Any) -> None:
    from benchmarks._spark_throughput import measure_spark_throughput

    figures = measure_spark_throughput(3000, authkey_env=KEY_ENV, repeats=1)

    redis = () if "redis_missing" in figures else ("redis_source_", "raw_redis_source_", "redis_sink_")
    for prefix in ("source_", "sink_", "", *redis):
        assert figures[f"{prefix}rows"] == figures[f"{prefix}rows_out"] == 3000, prefix
        assert figures[f"{prefix}rows_per_second"] == pytest.approx(
            3000 / figures[f"{prefix}seconds"], rel=0.01, abs=1), prefix
    assert 0 < figures["latency_seconds_median"] <= figures["latency_seconds_max"]
