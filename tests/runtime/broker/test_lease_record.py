"""Lease records: the row a leased delivery becomes, for each kind of message."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import Bus, Message
from runtime.broker.lease._ipc import lease_ipc
from runtime.broker.lease._record import COLUMNS, LeaseColumns, LeaseRecord, record_of


def received(topic: Any, count: int) -> list[Any]:
    member = topic.subscription(group="spark", prefetch=16)
    deliveries: list[Any] = []
    while len(deliveries) < count:
        deliveries += member.receive_many(count - len(deliveries), timeout=5)
    return deliveries


def test_a_publisher_message_becomes_the_row_of_its_stamped_copy() -> None:
    with Bus() as bus:
        topic = bus.create_topic("orders", ack_timeout=None)
        topic.create_group("spark")
        topic._publish_batch([
            Message(data=b"a", attributes={"x": "1"}, ordering_key="k"),
            Message(data=bytearray(b"b")),
        ]).result(timeout=5)
        deliveries = sorted(received(topic, 2), key=lambda d: d.message_id)

        records = [record_of(d, clock=lambda: -1.0) for d in deliveries]

        stamped = [d.message for d in deliveries]
        assert records == [
            LeaseRecord(m.message_id, m.ordering_key, bytes(m.data), m.attributes, m.publish_time, 1)
            for m in stamped
        ]
        assert records[0].key == "k" and records[1].key is None
        assert type(records[1].payload) is bytes and records[0].published_at > 0


def test_plain_objects_are_encoded_and_stamped_now() -> None:
    with Bus() as bus:
        topic = bus.create_topic("orders", ack_timeout=None)
        topic.create_group("spark")
        topic.publish("text", key="k", attributes={"n": "2"})
        topic.publish({"a": 1})
        deliveries = sorted(received(topic, 2), key=lambda d: d.message_id)

        records = [record_of(d, clock=lambda: 42.0) for d in deliveries]

    assert [(r.payload, r.key, r.attributes, r.published_at) for r in records] == [
        (b"text", "k", {"n": "2"}, 42.0), (b'{"a":1}', None, {}, 42.0)]
    assert COLUMNS == ("message_id", "key", "payload", "attributes", "published_at", "attempt")


def test_a_range_crosses_as_arrow_ipc_with_every_column_as_it_was() -> None:
    pa = pytest.importorskip("pyarrow")
    records = [
        LeaseRecord("m0", None, b"a", {}, 1.5, 1),
        LeaseRecord("m1", "key", b"", {"x": "1", "y": "2"}, 2.000_001, 3),
        LeaseRecord("m2", "\udcff", b"\x00\xff", {}, 3.25, 2),  # a binary key, not UTF-8
    ]
    table = pa.ipc.open_stream(lease_ipc(LeaseColumns.of_records(records))).read_all()
    assert table.column_names == list(COLUMNS)
    assert table.column("message_id").to_pylist() == ["m0", "m1", "m2"]
    assert table.column("key").to_pylist() == [None, "key", "\ufffd"]
    assert table.column("payload").to_pylist() == [b"a", b"", b"\x00\xff"]
    assert table.column("attributes").to_pylist() == [[], [("x", "1"), ("y", "2")], []]
    micros = table.column("published_at").cast(pa.int64()).to_pylist()
    assert micros == [1_500_000, 2_000_001, 3_250_000]
    assert table.column("attempt").to_pylist() == [1, 3, 2]
    assert pa.ipc.open_stream(lease_ipc(LeaseColumns.of_records([]))).read_all().num_rows == 0


@pytest.mark.parametrize("stamp", [1.5, 1_700_000_000.123_456_7, 1_700_000_000.999_999_9, 2.000_001])
def test_columns_alike_in_every_row_cross_as_the_general_path_writes_them(stamp: float) -> None:
    pa = pytest.importorskip("pyarrow")
    alike = [LeaseRecord(f"m{i}", None, b"p%d" % i, {}, stamp, 2) for i in range(4)]
    # One row that differs makes every column go through the general conversion.
    mixed = [*alike, LeaseRecord("m4", "k", b"p4", {"x": "1"}, stamp + 1, 1)]

    fast = pa.ipc.open_stream(lease_ipc(LeaseColumns.of_records(alike))).read_all()
    general = pa.ipc.open_stream(lease_ipc(LeaseColumns.of_records(mixed))).read_all().slice(0, 4)

    assert fast.schema.equals(general.schema)
    for name in COLUMNS:
        assert fast.column(name).to_pylist() == general.column(name).to_pylist(), name
    assert fast.column("published_at").cast(pa.int64()).to_pylist() == [int(stamp * 1e6)] * 4
