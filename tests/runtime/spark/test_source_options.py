"""The source's options, and min_messages_per_batch against a real loopback broker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.spark import authkey, options

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from runtime import Bus, Message  # noqa: E402
from runtime.broker._server import BusServer, serve  # noqa: E402
from runtime.errors import InvalidSettingsError  # noqa: E402
from runtime.spark._options import SinkOptions, SourceOptions  # noqa: E402
from runtime.spark._source import ActorbusStreamReader  # noqa: E402


@pytest.fixture
def server() -> Iterator[tuple[Bus, BusServer]]:
    with Bus() as bus, serve(bus, authkey=authkey()) as server:
        yield bus, server


def parse(**extra: Any) -> SourceOptions:
    return SourceOptions.parse({**options(("127.0.0.1", 1), topic="t"), **extra})


@pytest.mark.parametrize(("extra", "text"), [
    ({"starting_position": "latest"}, "'latest' is not offered"),
    ({"starting_position": "middle"}, "must be one of acked, earliest"),
    ({"fail_on_data_loss": "maybe"}, "must be 'true' or 'false'"),
    ({"min_messages_per_batch": "0"}, "must be > 0"),
    ({"maxOffsetsPerTrigger": "5"}, "unknown option"),
])
def test_bad_options_are_refused_with_their_name(extra: dict[str, str], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        parse(**extra)


@pytest.mark.parametrize(("extra", "setting", "text"), [
    ({"partitions": "abc"}, "partitions", "must be a whole number > 0, got 'abc'"),
    ({"partitions": "2.5"}, "partitions", "got '2.5'"),
    ({"max_messages_per_batch": "-3"}, "max_messages_per_batch", "must be > 0, got '-3'"),
    ({"lease_seconds": "nan"}, "lease_seconds", "finite, got 'nan'"),
    ({"max_trigger_delay": "inf"}, "max_trigger_delay", "finite, got 'inf'"),
    ({"lease_seconds": "soon"}, "lease_seconds", "seconds > 0, got 'soon'"),
    ({"address": "nowhere"}, "address", "must be 'host:port', got 'nowhere'"),
    ({"address": "h:port"}, "address", "got 'h:port'"),
    ({"producer_id": "p"}, "producer_id", "unknown option of the actorbus source"),
    ({"topic": ""}, "topic", "requires this option"),
])
def test_each_bad_option_is_named_with_its_value(
    extra: dict[str, str], setting: str, text: str,
) -> None:
    with pytest.raises(InvalidSettingsError, match=re.escape(text)) as refused:
        parse(**extra)

    assert refused.value.setting == setting
    assert isinstance(refused.value, ValueError)


def test_an_unknown_option_lists_the_known_ones() -> None:
    with pytest.raises(InvalidSettingsError) as refused:
        SinkOptions.parse(options(("127.0.0.1", 1), topic="t", partitions="2"))

    assert refused.value.setting == "partitions"
    assert str(refused.value).endswith(
        "known: address, authkey_env, batch_id, error_column, producer_id, redis, topic")


def test_defaults() -> None:
    parsed = parse()

    assert (parsed.lease_seconds, parsed.fail_on_data_loss, parsed.min_messages_per_batch,
            parsed.max_trigger_delay, parsed.consumer) == (30.0, True, None, 900.0, "spark")


def reader(server: BusServer, topic: str, **extra: Any) -> ActorbusStreamReader:
    from pyspark.sql.types import StructType

    return ActorbusStreamReader(SourceOptions.parse(options(
        server.address, topic=topic, group="spark", **extra)), StructType([]))


def topic_with(bus: Bus, name: str, count: int) -> Any:
    topic = bus.create_topic(name, ack_timeout=None)
    topic.create_group("spark")
    publish(topic, count)
    return topic


def publish(topic: Any, count: int) -> None:
    topic._publish_batch([Message(data=f"m{i}".encode()) for i in range(count)]).result(timeout=10)


def test_min_messages_waits_for_enough_unless_the_delay_passed(server: tuple[Bus, BusServer]) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    bus, broker = server
    slow, late = topic_with(bus, "slow", 5), topic_with(bus, "late", 5)
    waiting = reader(broker, slow.name, min_messages_per_batch=10)
    due = reader(broker, late.name, min_messages_per_batch=10, max_trigger_delay=0.001)
    try:
        start = waiting.initialOffset()
        held_back = waiting.latestOffset(start, ReadAllAvailable())["offset"]
        publish(slow, 5)
        enough = waiting.latestOffset(start, ReadAllAvailable())["offset"]
        overdue = due.latestOffset(due.initialOffset(), ReadAllAvailable())["offset"]
    finally:
        waiting.stop()
        due.stop()

    assert (held_back, enough, overdue) == (0, 10, 5)
