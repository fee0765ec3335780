"""Arrow on the data plane: the broker's IPC bytes to source batches, sink batches to IPC bytes."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from runtime.broker.lease._ipc import END_KEY

__all__ = ["SOURCE_SCHEMA", "check_sink_schema", "record_batch", "sink_batch", "sink_ipc"]

SOURCE_SCHEMA = (
    "message_id string, key string, payload binary, attributes map<string,string>, "
    "published_at timestamp, attempt int"
)


def record_batch(data: bytes, schema: StructType) -> tuple[pa.RecordBatch, int]:
    """The source rows of the broker's Arrow IPC ``data`` (one batch) in exactly Spark's
    Arrow schema (columns as they are, cast only where a type differs), and the offset
    the batch ends at (its metadata's ``END_KEY``).

    Raises:
        ValueError: the batch names no end offset.
    """
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    table = pa.ipc.open_stream(data).read_all()
    end = (table.schema.metadata or {}).get(END_KEY)
    if end is None:
        raise ValueError("actorbus: the broker's lease batch names no end offset")
    columns = [table.column(field.name).combine_chunks() for field in arrow_schema]
    batch = pa.RecordBatch.from_arrays(
        [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, arrow_schema, strict=True)],
        schema=arrow_schema)
    return batch, int(end)


def check_sink_schema(schema: StructType, error_column: str | None) -> None:
    """Refuse a frame the sink cannot publish, before any task runs.

    Raises:
        ValueError: no ``payload`` column, or a column of the wrong type.
    """
    fields = {field.name: field.dataType for field in schema.fields}
    if not isinstance(fields.get("payload"), BinaryType | StringType):
        raise ValueError("actorbus sink: a 'payload' column of binary or string type is required")
    if "key" in fields and not isinstance(fields["key"], StringType | BinaryType):
        raise ValueError("actorbus sink: column 'key' must be a string or binary")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise ValueError("actorbus sink: column 'topic' must be a string (the row's topic)")
    attributes = fields.get("attributes")
    if attributes is not None and not (
        isinstance(attributes, MapType) and isinstance(attributes.keyType, StringType)
    ):
        raise ValueError("actorbus sink: column 'attributes' must be map<string,string>")
    if error_column is not None and error_column not in fields:
        raise ValueError(f"actorbus sink: error_column {error_column!r} is not a column")


def sink_ipc(batch: pa.RecordBatch, error_column: str | None) -> bytes:
    """The staged part of one sink batch as Arrow IPC bytes (see `sink_batch`): one
    ``bytes`` value on the wire, read on the broker into columns in C loops."""
    rows = sink_batch(batch, error_column)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_batch(rows)
    return bytes(sink.getvalue().to_pybytes())


def sink_batch(batch: pa.RecordBatch, error_column: str | None) -> pa.RecordBatch:
    """The staged columns of one sink batch: ``payload`` (binary), and ``key`` (string
    or binary, as it is), ``attributes`` (map<string,string>) and ``error`` (string)
    when present.

    A key, attributes or error column without a single value (all null, or only empty
    maps) is left out: it stages exactly like an absent one.
    """
    names = set(batch.schema.names)
    payload = batch.column("payload")
    columns: dict[str, pa.Array] = {
        "payload": payload if pa.types.is_binary(payload.type) else payload.cast(pa.binary())}
    if "key" in names and _has_values(batch.column("key")):
        columns["key"] = batch.column("key")
    if "attributes" in names and _has_values(batch.column("attributes")):
        columns["attributes"] = _text_maps(batch.column("attributes"))
    if error_column is not None and _has_values(batch.column(error_column)):
        columns["error"] = batch.column(error_column).cast(pa.string())
    return pa.RecordBatch.from_pydict(columns)


def _text_maps(column: pa.Array) -> pa.Array:
    """A map column as map<string,string>: cast in Arrow, or (values Arrow cannot cast,
    e.g. structs) each value's ``str``."""
    text = pa.map_(pa.string(), pa.string())
    try:
        return column.cast(text)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return pa.array([None if pairs is None else [(str(k), str(v)) for k, v in pairs]
                         for pairs in column.to_pylist()], text)


def _has_values(column: pa.Array) -> bool:
    if column.null_count == len(column):
        return False
    if isinstance(column, pa.MapArray):  # offsets are relative to a slice's own rows
        offsets = column.offsets
        return bool(offsets[len(column)].as_py() - offsets[0].as_py())
    return True
