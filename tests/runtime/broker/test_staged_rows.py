"""Staged rows: columns become messages at stage time; error rows are set aside."""

from __future__ import annotations

import pytest

from runtime.broker._staged_rows import StagedRows


def test_columns_become_messages_in_row_order() -> None:
    rows = StagedRows.from_columns({
        "payload": [b"a", "b", bytearray(b"c")],
        "key": ["k", None, ""],
        "attributes": [{"x": 1}, None, {}],
    })

    assert [m.data for m in rows.messages] == [b"a", b"b", b"c"]
    assert [m.ordering_key for m in rows.messages] == ["k", None, None]
    assert [m.attributes for m in rows.messages] == [{"x": "1"}, {}, {}]
    assert rows.rejected == [] and len(rows) == 3


def test_rows_without_attributes_hold_no_dict_and_read_as_their_own_empty_one() -> None:
    rows = StagedRows.from_columns({"payload": [b"a", b"b"], "error": [None, "bad"]})

    assert rows.attributes == [None]
    messages = rows.messages
    assert [m.attributes for m in messages] == [{}]
    assert rows.rejected[0][0].attributes == {}
    assert messages[0].attributes is not rows.rejected[0][0].attributes


def test_rows_with_an_error_are_rejected_with_their_text() -> None:
    rows = StagedRows.from_columns({
        "payload": [b"a", b"bad", b"c", b"worse"],
        "error": [None, "poison", None, 7],
    })

    assert [m.data for m in rows.messages] == [b"a", b"c"]
    assert [(m.data, error) for m, error in rows.rejected] == [(b"bad", "poison"), (b"worse", "7")]
    assert len(rows) == 4


@pytest.mark.parametrize("columns", [
    {"payload": [b"a"], "key": ["k", "l"]},
    {"payload": [1]},
    {"key": ["k"]},
    {"payload": [b"a"], "other": [1]},
])
def test_bad_columns_are_refused(columns: dict[str, list[object]]) -> None:
    with pytest.raises(ValueError):
        StagedRows.from_columns(columns)


def test_rows_know_about_what_they_hold_decoded() -> None:
    from runtime.broker._arrow_frame import ROW_COST

    rows = StagedRows.from_columns({"payload": [b"abc", "de", b""], "error": [None, "x", None]})

    assert rows.size == 5 + 3 * ROW_COST


def test_an_arrow_part_is_refused_past_its_decoded_size_before_it_is_decoded() -> None:
    import pyarrow as pa

    from runtime.broker._wire import NotTransferableError

    batch = pa.RecordBatch.from_pydict({"payload": pa.array([b""] * 10_000, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    frame = sink.getvalue().to_pybytes()

    with pytest.raises(NotTransferableError, match=r"about 1,0\d\d,\d\d\d bytes, over the limit of 100,000"):
        StagedRows.from_ipc(frame, max_bytes=100_000)
    assert len(StagedRows.from_ipc(frame)) == 10_000
