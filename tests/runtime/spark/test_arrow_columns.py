"""The Spark bridge's Arrow conversions (no Spark session needed, only pyspark/pyarrow)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark
pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from runtime.spark._arrow import sink_columns  # noqa: E402

MAP = pa.map_(pa.string(), pa.string())


def batch(keys: list[str | None], attributes: list[object], errors: list[str | None]) -> object:
    return pa.RecordBatch.from_pydict({
        "payload": [b"a", b"b", b"c"], "key": pa.array(keys, pa.string()),
        "attributes": pa.array(attributes, MAP), "err": pa.array(errors, pa.string()),
    })


def test_columns_without_values_are_left_out() -> None:
    rows = batch([None, None, None], [[], None, []], [None, None, None])

    columns = sink_columns(rows, "err")

    assert columns == {"payload": [b"a", b"b", b"c"]}


def test_columns_with_values_are_sent_whole() -> None:
    rows = batch([None, "k", None], [[("x", "1")], None, []], [None, "bad", None])

    columns = sink_columns(rows, "err")

    assert columns == {
        "payload": [b"a", b"b", b"c"], "key": [None, "k", None],
        "attributes": [{"x": "1"}, None, {}], "error": [None, "bad", None],
    }


def test_a_slice_is_judged_by_its_own_rows() -> None:
    rows = batch([None, "k", None], [[("x", "1")], None, []], [None, "bad", None])

    head, tail = sink_columns(rows.slice(0, 1), "err"), sink_columns(rows.slice(1, 2), "err")

    assert head == {"payload": [b"a"], "attributes": [{"x": "1"}]}
    assert tail == {"payload": [b"b", b"c"], "key": ["k", None], "error": ["bad", None]}


def test_binary_keys_map_losslessly_onto_text_keys() -> None:
    raw = [b"caf\xc3\xa9", b"\xff\x00bin", None]
    rows = pa.RecordBatch.from_pydict({"payload": [b"a", b"b", b"c"], "key": pa.array(raw, pa.binary())})

    keys = sink_columns(rows, None)["key"]

    assert keys[0] == "café"  # a UTF-8 key is its text
    assert [None if k is None else k.encode("utf-8", "surrogateescape") for k in keys] == raw
