"""Task retries on local[2,3]: a failed attempt re-reads its range and publishes nothing twice.

Its own module because it needs its own session: ``local[2,3]`` allows 3 task attempts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.spark import authkey, needs_spark, options, spark_session

from runtime import Bus, Message
from runtime.broker._server import BusServer, serve
from runtime.errors import WouldBlock

pytestmark = [*needs_spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session("local[2,3]")


@pytest.fixture
def server(bus: Bus, spark: Any) -> Iterator[BusServer]:
    from runtime.spark import register

    register(spark)
    with serve(bus, authkey=authkey()) as server:
        yield server


def test_failed_task_is_retried_and_the_output_has_no_duplicates(
    spark: Any, server: BusServer, bus: Bus, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    def fail_first_attempt(payload: bytes) -> bytes:  # nested: pickled by value to the workers
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0:
            raise RuntimeError("injected failure of the first attempt")
        return payload.upper()

    source = bus.create_topic("in", ack_timeout=None)
    source.create_group("spark")
    sink = bus.create_topic("out", ack_timeout=None)
    sink.create_group("check")
    source._publish_batch([Message(data=f"m{i}".encode()) for i in range(40)]).result(timeout=10)
    frame = spark.readStream.format("actorbus").options(**options(
        server.address, topic="in", group="spark", max_messages_per_batch=20)).load()
    upper = F.udf(fail_first_attempt, "binary", useArrow=False)

    query = (frame.select(upper("payload").alias("payload"), "key")
             .writeStream.format("actorbus").options(**options(server.address, topic="out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()

    subscription = sink.subscription(group="check")
    out = []
    while True:
        try:
            delivery = subscription.receive_nowait()
        except WouldBlock:
            try:
                delivery = subscription.receive(timeout=1.0)
            except TimeoutError:
                break
        delivery.ack()
        out.append(delivery.message.data)
    subscription.unsubscribe()
    assert sorted(out) == sorted(f"M{i}".encode() for i in range(40))
    assert source.join(timeout=10)
    assert source.stats().delivered == 40
