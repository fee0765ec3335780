"""Read and write tasks overlap their broker calls with their own work (a real broker on
loopback, no Spark session): a range spanning many fetch replies reads whole and in
order, and staged chunks are all recorded, also when a topic refuses them midway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.spark import authkey, needs_spark, options, publish

from runtime import Bus
from runtime.broker import _service
from runtime.broker._server import BusServer, serve

pytestmark = needs_spark


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        bus.create_topic("in", ack_timeout=None).create_group("g")
        bus.create_topic("out", ack_timeout=None)
        bus.create_topic("other", ack_timeout=None)
        yield bus


@pytest.fixture
def server(bus: Bus) -> Iterator[BusServer]:
    with serve(bus, authkey=authkey()) as server:
        yield server


def _schema() -> object:
    from pyspark.sql import types as T

    return T.StructType([  # the source's schema (SOURCE_SCHEMA), without a JVM to parse it
        T.StructField("message_id", T.StringType()), T.StructField("key", T.StringType()),
        T.StructField("payload", T.BinaryType()),
        T.StructField("attributes", T.MapType(T.StringType(), T.StringType())),
        T.StructField("published_at", T.TimestampType()), T.StructField("attempt", T.IntegerType()),
    ])


def _source(server: BusServer) -> object:
    from runtime.spark._options import SourceOptions

    return SourceOptions.parse(options(server.address, topic="in", group="g"))


def test_a_range_of_many_replies_reads_whole_and_in_order(
    bus: Bus, server: BusServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.spark._source import OffsetRange, fetch_range

    monkeypatch.setattr(_service, "FETCH_BYTES", 1000)  # ~10 payloads of 100 bytes a reply
    payloads = [b"%03d" % i + b"p" * 97 for i in range(120)]
    publish(bus.topic("in"), payloads)
    source = _source(server)
    schema = _schema()
    with source.connect() as channel:  # type: ignore[attr-defined]
        end = channel.call("lease_latest", *source.lease, 0, 120)  # type: ignore[attr-defined]
        assert end == 120
        batches = list(fetch_range(channel, source, schema, OffsetRange(0, end)))  # type: ignore[arg-type]
        # Closed after its first batch: the fetch it started ends before the call returns.
        early = fetch_range(channel, source, schema, OffsetRange(0, end))  # type: ignore[arg-type]
        first = next(early)
        early.close()

    assert len(batches) == 12
    assert [row for b in batches for row in b.column("payload").to_pylist()] == payloads
    assert first.column("payload").to_pylist() == payloads[:10]


def test_a_task_reads_a_small_first_fetch_then_slices_of_bounded_rows(
    bus: Bus, server: BusServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.spark import _source as source_module
    from runtime.spark._source import OffsetRange, fetch_range

    monkeypatch.setattr(source_module, "SLICE_ROWS", 4)
    fetched: list[tuple[int, int]] = []
    fetch = _service.BrokerService.lease_fetch_arrow

    def counted(self: object, *args: object) -> bytes:
        fetched.append((args[-2], args[-1]))  # type: ignore[arg-type]
        return fetch(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_service.BrokerService, "lease_fetch_arrow", counted)
    payloads = [b"%03d" % i + b"q" * 97 for i in range(30)]
    publish(bus.topic("in"), payloads)
    source = _source(server)
    with source.connect() as channel:  # type: ignore[attr-defined]
        end = channel.call("lease_latest", *source.lease, 0, 30)  # type: ignore[attr-defined]
        batches = list(fetch_range(channel, source, _schema(), OffsetRange(2, end)))  # type: ignore[arg-type]

    # The first fetch asks for one slice, the second for the rest of the range (one
    # reply here); Spark gets batches of at most SLICE_ROWS rows, in order.
    assert fetched == [(2, 6), (6, 30)]
    assert [b.num_rows for b in batches] == [4, 4, 4, 4, 4, 4, 4]
    assert [row for b in batches for row in b.column("payload").to_pylist()] == payloads[2:]


def test_staged_chunks_are_all_recorded_and_a_committed_topic_stops_early(
    bus: Bus, server: BusServer,
) -> None:
    import pyarrow as pa

    from runtime.spark._options import SinkOptions
    from runtime.spark._sink import stage_chunks

    sink = SinkOptions.parse(options(server.address, topic="out"))
    reader = bus.topic("out").subscription(group="check", prefetch=16)
    chunks = [pa.RecordBatch.from_pydict({
        "payload": [b"%d-%d" % (c, i) for i in range(5)],
        "topic": [None, "other", None, "other", None],
    }) for c in range(4)]
    with sink.connect() as channel:
        # "other" committed this batch before (from another task): nothing more of it.
        channel.call("stage", "other", "p", "7", (9, 0, 0), {"payload": [b"before"]})
        assert channel.call("commit", "other", "p", "7", [(9, 0, 0)]) is True
        staged = stage_chunks(channel, sink, "p", "7", (3, 1), chunks)
        assert channel.call("commit", "out", "p", "7", [part for _, part in staged.parts]) is True

    assert staged.parts == [("out", (3, 1, c)) for c in range(4)]
    assert staged.rows == 12
    received = [reader.receive(timeout=5).message.data for _ in range(12)]
    assert received == [b"%d-%d" % (c, i) for c in range(4) for i in (0, 2, 4)]
    assert bus.topic("out").stats().published == 12
    assert bus.topic("other").stats().published == 1
