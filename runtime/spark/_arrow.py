"""Arrow on the data plane: source columns to record batches, sink batches to columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

__all__ = ["SOURCE_SCHEMA", "check_sink_schema", "key_text", "record_batch", "sink_columns"]

SOURCE_SCHEMA = (
    "message_id string, key string, payload binary, attributes map<string,string>, "
    "published_at timestamp, attempt int"
)


def record_batch(columns: Mapping[str, list[Any]], schema: StructType) -> pa.RecordBatch:
    """The source rows of broker ``columns`` as one batch of exactly Spark's Arrow schema."""
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    micros = [int(t * 1_000_000) for t in columns["published_at"]]
    attributes = columns["attributes"]
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for mapping in attributes:
        keys += mapping.keys()
        values += mapping.values()
        offsets.append(len(keys))
    arrays = {
        "message_id": pa.array(columns["message_id"], pa.string()),
        "key": _source_keys(columns["key"]),
        "payload": pa.array(columns["payload"], pa.binary()),
        "attributes": pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())),
        "published_at": pa.array(micros, pa.timestamp("us", tz="UTC")),
        "attempt": pa.array(columns["attempt"], pa.int32()),
    }
    return pa.RecordBatch.from_arrays(
        [arrays[field.name].cast(field.type) for field in arrow_schema], schema=arrow_schema)


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


def sink_columns(batch: pa.RecordBatch, error_column: str | None) -> dict[str, list[Any]]:
    """The staged columns of one sink batch: payload, and key/attributes/error if present.

    A key, attributes or error column without a single value (all null, or only empty
    maps) is left out: it stages exactly like an absent one, without a Python object
    per row.
    """
    names = set(batch.schema.names)
    columns: dict[str, list[Any]] = {"payload": batch.column("payload").to_pylist()}
    if "key" in names and _has_values(batch.column("key")):
        columns["key"] = [key_text(k) for k in batch.column("key").to_pylist()]
    if "attributes" in names and _has_values(batch.column("attributes")):
        columns["attributes"] = [
            None if pairs is None else {str(k): str(v) for k, v in pairs}
            for pairs in batch.column("attributes").to_pylist()
        ]
    if error_column is not None and _has_values(batch.column(error_column)):
        errors = batch.column(error_column).to_pylist()
        columns["error"] = [None if e is None else str(e) for e in errors]
    return columns


def key_text(key: str | bytes | None) -> str | None:
    """The runtime's ``str`` ordering key of a sink key: text as it is; bytes decoded as
    UTF-8 with ``surrogateescape``, which is lossless (``key.encode("utf-8",
    "surrogateescape")`` gives the bytes back) and keeps a UTF-8 key equal to its text."""
    if isinstance(key, bytes):
        return key.decode("utf-8", "surrogateescape")
    return key


def _source_keys(keys: list[str | None]) -> pa.Array:
    try:
        return pa.array(keys, pa.string())
    except UnicodeEncodeError:  # a binary key that is not UTF-8: Arrow strings must be
        return pa.array([None if k is None else k.encode("utf-8", "surrogateescape").decode(
            "utf-8", "replace") for k in keys], pa.string())


def _has_values(column: pa.Array) -> bool:
    if column.null_count == len(column):
        return False
    if isinstance(column, pa.MapArray):  # offsets are relative to a slice's own rows
        offsets = column.offsets
        return bool(offsets[len(column)].as_py() - offsets[0].as_py())
    return True
