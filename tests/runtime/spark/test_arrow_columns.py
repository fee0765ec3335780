"""The Spark bridge's Arrow conversions (no Spark session needed, only pyspark/pyarrow)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark
pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from runtime.broker._staged_rows import StagedRows  # noqa: E402
from runtime.broker._wire import NotTransferableError  # noqa: E402
from runtime.spark._arrow import sink_batch, sink_ipc  # noqa: E402

MAP = pa.map_(pa.string(), pa.string())


def batch(keys: list[str | None], attributes: list[object], errors: list[str | None]) -> object:
    return pa.RecordBatch.from_pydict({
        "payload": [b"a", b"b", b"c"], "key": pa.array(keys, pa.string()),
        "attributes": pa.array(attributes, MAP), "err": pa.array(errors, pa.string()),
    })


def test_columns_without_values_are_left_out() -> None:
    rows = batch([None, None, None], [[], None, []], [None, None, None])

    columns = sink_batch(rows, "err").to_pydict()

    assert columns == {"payload": [b"a", b"b", b"c"]}


def test_columns_with_values_are_sent_whole() -> None:
    rows = batch([None, "k", None], [[("x", "1")], None, []], [None, "bad", None])

    columns = sink_batch(rows, "err").to_pydict()

    assert columns == {
        "payload": [b"a", b"b", b"c"], "key": [None, "k", None],
        "attributes": [[("x", "1")], None, []], "error": [None, "bad", None],
    }


def test_a_slice_is_judged_by_its_own_rows() -> None:
    rows = batch([None, "k", None], [[("x", "1")], None, []], [None, "bad", None])

    head = sink_batch(rows.slice(0, 1), "err").to_pydict()
    tail = sink_batch(rows.slice(1, 2), "err").to_pydict()

    assert head == {"payload": [b"a"], "attributes": [[("x", "1")]]}
    assert tail == {"payload": [b"b", b"c"], "key": ["k", None], "error": ["bad", None]}


def test_binary_keys_map_losslessly_onto_text_keys() -> None:
    raw = [b"caf\xc3\xa9", b"\xff\x00bin", None]
    rows = pa.RecordBatch.from_pydict({"payload": [b"a", b"b", b"c"], "key": pa.array(raw, pa.binary())})

    keys = [m.ordering_key for m in StagedRows.from_ipc(sink_ipc(rows, None)).messages]

    assert keys[0] == "café"  # a UTF-8 key is its text
    assert [None if k is None else k.encode("utf-8", "surrogateescape") for k in keys] == raw


def test_a_staged_part_crosses_as_arrow_and_becomes_the_same_messages() -> None:
    rows = pa.RecordBatch.from_pydict({
        "payload": pa.array(["a", "b", "c"], pa.string()), "key": pa.array(["k", None, "m"]),
        "attributes": pa.array([[("x", 1)], None, []], pa.map_(pa.string(), pa.int64())),
        "err": pa.array([None, "bad", None], pa.string()),
    })

    staged = StagedRows.from_ipc(sink_ipc(rows, "err"))

    assert [(m.data, m.ordering_key, m.attributes) for m in staged.messages] == [
        (b"a", "k", {"x": "1"}), (b"c", "m", {})]
    assert [(m.data, error) for m, error in staged.rejected] == [(b"b", "bad")]


def test_bytes_that_are_not_arrow_are_refused_at_staging() -> None:
    with pytest.raises(NotTransferableError, match="not a valid Arrow IPC stream"):
        StagedRows.from_ipc(b"garbage")


def test_attribute_values_arrow_cannot_cast_become_their_text() -> None:
    values = pa.map_(pa.string(), pa.struct([("n", pa.int64())]))
    rows = pa.RecordBatch.from_pydict({
        "payload": [b"a"], "attributes": pa.array([[("x", {"n": 1})]], values)})

    staged = StagedRows.from_ipc(sink_ipc(rows, None))

    assert [m.attributes for m in staged.messages] == [{"x": "{'n': 1}"}]


def test_all_null_columns_in_a_staged_stream_read_as_absent() -> None:
    import io

    table = pa.RecordBatch.from_pydict({
        "payload": [b"a", b"b"], "key": pa.array([None, None], pa.string()),
        "attributes": pa.array([None, None], MAP), "error": pa.array([None, None], pa.string()),
    })
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:  # not through sink_ipc: all sent
        writer.write_batch(table)

    staged = StagedRows.from_ipc(sink.getvalue())

    assert (staged.datas, staged.keys, staged.attributes, staged.rejected) == (
        [b"a", b"b"], [None, None], [None, None], [])
