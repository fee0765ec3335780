"""Bad ``format("actorbus")`` options on a real local Spark: refused at ``load()`` /
``save()`` (a streaming sink: in its query's first step), naming the option and the value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.spark import authkey, needs_spark, options, spark_session

from runtime import Bus
from runtime.broker._server import BusServer, serve

pytestmark = [*needs_spark, pytest.mark.timeout(300)]

# What a refusal must not look like: a number parser's text, PySpark's runner failing
# after the source did.
NOT_READABLE = ("could not convert", "UnboundLocalError", "invalid literal")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session()


@pytest.fixture
def server(spark: Any) -> Iterator[BusServer]:
    from runtime.spark import register

    register(spark)
    with Bus() as bus, serve(bus, authkey=authkey()) as server:
        bus.create_topic("t", ack_timeout=None).create_group("spark")
        yield server


def _refusal(action: Any) -> str:
    with pytest.raises(Exception) as refused:  # Spark wraps it: the text counts
        action()
    return str(refused.value)


def _readable(text: str, *names: str) -> None:
    assert "InvalidSettingsError: invalid setting" in text
    for name in names:
        assert name in text
    for bad in NOT_READABLE:
        assert bad not in text


@pytest.mark.parametrize(("extra", "names"), [
    ({"partitions": "abc"}, ("'partitions'", "got 'abc'")),
    ({"lease_seconds": "nan"}, ("'lease_seconds'", "got 'nan'")),
    ({"max_messages_per_batch": "0"}, ("'max_messages_per_batch'", "got '0'")),
    ({"fail_on_data_loss": "yes"}, ("'fail_on_data_loss'", "got 'yes'")),
    # Spark hands the options over with their names in lower case.
    ({"maxOffsetsPerTrigger": "5"}, ("'maxoffsetspertrigger'", "known: address, authkey_env, consumer")),
    ({"producer_id": "p"}, ("'producer_id'", "unknown option of the actorbus source")),
])
@pytest.mark.parametrize("kind", ["readStream", "read"])
def test_a_bad_source_option_fails_load_naming_it(
    spark: Any, server: BusServer, kind: str, extra: dict[str, str], names: tuple[str, ...],
) -> None:
    reader = getattr(spark, kind).format("actorbus").options(
        **options(server.address, topic="t"), **extra)

    text = _refusal(reader.load)

    _readable(text, *names)


@pytest.mark.parametrize(("extra", "names"), [
    ({"partitions": "2"}, ("'partitions'", "known: address, authkey_env, batch_id, error_column")),
    ({"address": "nowhere"}, ("'address'", "got 'nowhere'")),
])
def test_a_bad_sink_option_fails_save_naming_it(
    spark: Any, server: BusServer, extra: dict[str, str], names: tuple[str, ...],
) -> None:
    frame = spark.createDataFrame([(b"x",)], "payload binary")
    writer = frame.write.format("actorbus").options(
        **{**options(server.address, topic="t"), **extra}).mode("append")

    text = _refusal(writer.save)

    _readable(text, *names)


def test_a_streaming_sink_without_a_topic_fails_its_query_naming_it(
    spark: Any, server: BusServer, tmp_path: Path,
) -> None:
    rows = spark.readStream.format("rate").load().selectExpr("cast(value as string) as payload")
    query = (rows.writeStream.format("actorbus").options(**options(server.address))
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        text = _refusal(lambda: query.awaitTermination(60))
    finally:
        query.stop()

    _readable(text, "'topic'", "requires this option")
