"""The source's ack lifecycle under each trigger, broker restarts and driver kills.

Real local[2] Spark and real loopback brokers; one session for the module. A "broker
restart" is a second `Bus` served under the same topic names: a fresh lease log that
never saw the checkpoint's offsets.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.reliability import wait_until
from support.spark import authkey, drain, finish, needs_spark, options, publish, spark_session

from runtime import Bus
from runtime.broker._client import Channel
from runtime.broker._server import BusServer, serve

pytestmark = [*needs_spark, pytest.mark.timeout(300)]

_names = itertools.count(1)
DRIVER = Path(__file__).parents[2] / "support" / "spark_driver.py"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from runtime.spark import register

    for session in spark_session("local[2]"):
        register(session)
        yield session


@pytest.fixture
def broker() -> Iterator[Callable[..., tuple[Bus, BusServer]]]:
    """Starts brokers (a bus and its server), closed after the test."""
    started: list[tuple[Bus, BusServer]] = []

    def start() -> tuple[Bus, BusServer]:
        bus = Bus()
        started.append((bus, serve(bus, authkey=authkey())))
        return started[-1]

    yield start
    for bus, server in reversed(started):
        server.close()
        bus.close()


def topics(bus: Bus, name: str, **settings: Any) -> tuple[Any, Any]:
    """Topics ``name``-in (group "spark") and ``name``-out (group "check") on ``bus``."""
    source = bus.create_topic(f"{name}-in", ack_timeout=None, **settings)
    source.create_group("spark")
    sink = bus.create_topic(f"{name}-out", ack_timeout=None)
    sink.create_group("check")
    return source, sink


def query(spark: Any, server: BusServer, name: str, checkpoint: Path, trigger: dict[str, Any],
          **source_options: Any) -> Any:
    """``name``-in -> upper(payload) -> ``name``-out."""
    from pyspark.sql import functions as F

    frame = spark.readStream.format("actorbus").options(**options(
        server.address, topic=f"{name}-in", group="spark", **source_options)).load()
    out = frame.select(F.upper(F.col("payload").cast("string")).alias("payload"))
    return (out.writeStream.format("actorbus").options(**options(server.address, topic=f"{name}-out"))
            .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def position(server: BusServer, topic: str) -> int:
    with Channel(server.address, authkey()) as channel:
        return int(channel.call("lease_position", topic, "spark", "spark", 30.0))


def payloads(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


def test_available_now_after_a_broker_restart_acks_only_what_it_read(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    name = f"restart-{next(_names)}"
    first_bus, first = broker()
    source, _ = topics(first_bus, name)
    publish(source, payloads("a", 30))
    finish(query(spark, first, name, tmp_path / "ck", {"availableNow": True}, max_messages_per_batch=20))
    bus, server = broker()
    source, sink = topics(bus, name)
    publish(source, payloads("b", 50))

    finish(query(spark, server, name, tmp_path / "ck", {"availableNow": True}, max_messages_per_batch=20))

    assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in payloads("b", 50))
    assert source.join(timeout=10)
    assert source.stats().delivered == 50


def test_once_reads_one_bounded_batch_acks_it_and_reports_the_lag(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    name = f"once-{next(_names)}"
    bus, server = broker()
    source, sink = topics(bus, name)
    publish(source, payloads("m", 50))

    run = query(spark, server, name, tmp_path / "ck", {"once": True}, max_messages_per_batch=20)
    finish(run)

    assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in payloads("m", 20))
    assert wait_until(lambda: source.stats().delivered == 20, timeout=30)  # acked by the listener
    assert position(server, source.name) == 20
    progress = run.lastProgress["sources"][0]
    latest, end = json.loads(progress["latestOffset"]), json.loads(progress["endOffset"])
    assert (end["offset"], latest["offset"] - end["offset"]) == (20, 30)  # 30 still waiting


def poison_query(spark: Any, server: BusServer, name: str, checkpoint: Path, poisoned: bool,
                 **source_options: Any) -> Any:
    from pyspark.sql import functions as F

    def upper(payload: bytes) -> bytes:
        if poisoned and payload == b"poison":
            raise ValueError("poison row")
        return payload.upper()

    frame = spark.readStream.format("actorbus").options(**options(
        server.address, topic=f"{name}-in", group="spark", max_messages_per_batch=10,
        **source_options)).load()
    out = frame.select(F.udf(upper, "binary", useArrow=False)("payload").alias("payload"))
    return (out.writeStream.format("actorbus").options(**options(server.address, topic=f"{name}-out"))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_planned_batch_the_broker_lost_fails_the_query_unless_told_otherwise(
    spark: Any, broker: Any, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    name = f"loss-{next(_names)}"
    first_bus, first = broker()
    source, _ = topics(first_bus, name)
    publish(source, [b"ok", b"poison"])
    with pytest.raises(Exception, match="poison row"):  # batch 0 is planned, never committed
        finish(poison_query(spark, first, name, tmp_path / "ck", poisoned=True))
    bus, server = broker()  # the restarted broker never leased batch 0
    source, sink = topics(bus, name)
    publish(source, payloads("n", 5))

    rerun = poison_query(spark, server, name, tmp_path / "ck", poisoned=False,
                         fail_on_data_loss=str(fail_on_data_loss).lower())

    if fail_on_data_loss:
        with pytest.raises(Exception, match=r"no longer on the broker.*fail_on_data_loss=false"):
            finish(rerun)
        assert source.stats().delivered == 0
    else:
        finish(rerun)
        assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in payloads("n", 5))
        assert source.join(timeout=10)


def test_an_unknown_option_is_refused_by_name(spark: Any, broker: Any) -> None:
    _, server = broker()
    reader = spark.readStream.format("actorbus").options(**options(
        server.address, topic="t", max_message_per_batch=5))

    with pytest.raises(Exception, match=r"invalid setting 'max_message_per_batch': unknown option"):
        reader.load()


@pytest.mark.slow
@pytest.mark.parametrize("leases", ["live", "expired"])
def test_a_killed_driver_restarts_without_loss_or_duplicates(
    spark: Any, broker: Any, tmp_path: Path, leases: str
) -> None:
    name = f"kill-{leases}-{next(_names)}"
    bus, server = broker()
    source, sink = topics(bus, name, max_delivery_attempts=3)
    data = payloads("m", 100)
    data[70] = b"stall"  # the driver blocks in batch 3 (offsets 60-80): planned, not committed
    publish(source, data)
    lease = "30" if leases == "live" else "2"
    marker, checkpoint = tmp_path / "stalled", tmp_path / "ck"
    address = f"{server.address[0]}:{server.address[1]}"
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), address, source.name, sink.name, str(checkpoint), str(marker),
         lease], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(marker.exists, timeout=180, poll=0.1), "the driver never reached batch 3"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    if leases == "expired":  # batch 3's leases go back to the group
        assert wait_until(lambda: source.stats().redelivered >= 20, timeout=60, poll=0.1)

    finish(query(spark, server, name, checkpoint, {"availableNow": True},
                 max_messages_per_batch=20, lease_seconds=lease))

    assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in data)
    assert source.join(timeout=10)
    assert (source.stats().delivered, len(source.dead_letters)) == (100, 0)


def test_a_batch_read_returns_what_the_group_holds_and_acks_it(
    spark: Any, broker: Any
) -> None:
    bus, server = broker()
    source, _ = topics(bus, f"read-{next(_names)}")
    publish(source, payloads("r", 40))
    read = spark.read.format("actorbus").options(**options(
        server.address, topic=source.name, group="spark", max_messages_per_batch=30))

    first = sorted(row.payload for row in read.load().collect())
    second = sorted(row.payload for row in read.load().collect())

    assert sorted(first + second) == sorted(payloads("r", 40))
    assert (len(first), len(second)) == (30, 10)
    assert source.join(timeout=10)
    assert source.stats().delivered == 40


def test_a_topic_column_routes_each_row(spark: Any, broker: Any) -> None:
    bus, server = broker()
    name = f"route-{next(_names)}"
    default, _ = topics(bus, f"{name}-a")
    other, _ = topics(bus, f"{name}-b")
    for topic in (default, other):
        topic.create_group("check")
    frame = spark.createDataFrame(
        [(b"1", None), (b"2", other.name), (b"3", default.name), (b"4", other.name)],
        "payload binary, topic string")

    frame.write.format("actorbus").mode("append").options(**options(
        server.address, topic=default.name, producer_id="router", batch_id="b1")).save()
    frame.write.format("actorbus").mode("append").options(**options(
        server.address, topic=default.name, producer_id="router", batch_id="b1")).save()

    assert sorted(m.data for m in drain(default)) == [b"1", b"3"]
    assert sorted(m.data for m in drain(other)) == [b"2", b"4"]
