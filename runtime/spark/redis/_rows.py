"""Redis stream entries as Spark rows, and Spark rows as the fields of staged entries.

Both directions use the Redis backend's message fields (`runtime.redis._records`): ``b``
the body, ``f`` its format (``m``: a `Message`'s data; ``p``: a pickled object), ``k``
the ordering key, ``a`` the attributes as JSON. A row Spark writes is a `Message`, so a
Python consumer of the topic receives ``Message(data=payload, attributes=...)`` with
its key, and a Python publisher's messages reach Spark as their data.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from runtime.broker.lease._record import PayloadError, encode_payload
from runtime.core._settings import TopicSettings
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys
from runtime.redis._records import Codec, UndecodableError, optional

__all__ = ["Limits", "StagedRows", "held_batch", "staged_rows"]

logger = logging.getLogger(__name__)
_TEXT_MAP = pa.map_(pa.string(), pa.string())


@dataclass(frozen=True, slots=True)
class Limits:
    """What an executor needs to dead-letter an entry it cannot turn into a row."""

    group: str
    consumer: str
    settling: list[str]
    max_attempts: int
    dead_limit: int

    @classmethod
    def of(cls, settings: TopicSettings, keys: TopicKeys, group: str, consumer: str) -> Limits:
        """The limits of one partition's keys."""
        return cls(group, consumer, keys.settling(), settings.max_delivery_attempts,
                   settings.dead_letter_limit or 0)

    def bury(self, connection: Connection, entry_id: str, attempt: int, error: str) -> None:
        """Dead-letter one held entry with reason ``error`` (a final nack, fenced on this
        consumer and attempt; no deadline check: the consumer still holds it)."""
        logger.warning("actorbus source: dead-lettering entry %s of group %s: %s", entry_id,
                       self.group, error)
        connection.run("SETTLE", self.settling, [
            self.group, self.consumer, -1, 0, self.max_attempts, self.dead_limit,
            0, 1, entry_id, attempt, "x", "error", optional(error), "", ""])


def held_batch(reply: Sequence[Any], limits: Limits, connection: Connection,
               schema: StructType) -> pa.RecordBatch:
    """The rows of the read script's columnar reply (see ``READ_HELD``) in exactly
    Spark's Arrow schema. An entry whose body is no payload (refused by the restricted
    unpickler, or an object JSON cannot encode) is dead-lettered ``error`` and left out."""
    rows = int(reply[0])
    if not rows:  # held entries that were deleted from the stream
        return pa.RecordBatch.from_pylist([], schema=to_arrow_schema(schema, timezone="UTC"))
    ids = pa.array(reply[1].split(b" "), pa.binary())
    bodies, keys, attributes, replayed = (
        _binary(rows, reply[2 + 2 * n], reply[3 + 2 * n]) for n in range(4))
    attempts = pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(reply[10])])
    message_ids = ids if replayed is None else pc.if_else(pc.equal(replayed, b""), ids, replayed)
    keep = None
    if reply[11].strip(b"m"):  # some bodies are pickled objects: decode them here
        assert bodies is not None
        bodies, keep = _decode_bodies(bodies, reply[11], message_ids, ids, attempts, limits,
                                      connection)
    text_ids = message_ids.cast(pa.string())
    millis = pc.list_element(pc.split_pattern(text_ids, "-", max_splits=1), 0)
    columns = {
        "message_id": text_ids,
        "key": _keys(keys, rows),
        "payload": bodies,
        "attributes": _attributes(attributes, rows),
        "published_at": pc.multiply(millis.cast(pa.int64()), 1000).cast(
            pa.timestamp("us", tz="UTC")),
        "attempt": attempts,
    }
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    arrays = [columns[field.name] for field in arrow_schema]
    batch = pa.RecordBatch.from_arrays(
        [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, arrow_schema, strict=True)],
        schema=arrow_schema)
    return batch if keep is None else batch.filter(keep)


def _binary(rows: int, data: bytes, offsets: bytes) -> pa.Array | None:
    """A binary column from one string of values and its int32 offsets (None when the
    script left it out: no entry has a value)."""
    if not offsets:
        return None
    return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(data)])


def _decode_bodies(bodies: pa.Array, formats: bytes, message_ids: pa.Array, ids: pa.Array,
                   attempts: pa.Array, limits: Limits, connection: Connection,
                   ) -> tuple[pa.Array, pa.Array]:
    """Pickled bodies as payload bytes; and the mask of the rows kept (an undecodable
    body's entry is dead-lettered)."""
    codec = Codec()
    values = bodies.to_pylist()
    keep = [True] * len(values)
    for index, kind in enumerate(formats):
        if kind == ord("m"):
            continue
        message_id = message_ids[index].as_py().decode()
        try:
            message, _, _ = codec.message(message_id, {b"b": values[index], b"f": bytes([kind])})
            values[index] = encode_payload(message)
        except (UndecodableError, PayloadError) as exc:
            limits.bury(connection, ids[index].as_py().decode(), attempts[index].as_py(), str(exc))
            keep[index] = False
    return pa.array(values, pa.binary()), pa.array(keep)


def _keys(keys: pa.Array | None, rows: int) -> pa.Array:
    """Keys as text, none where an entry has none."""
    if keys is None:
        return pa.nulls(rows, pa.string())
    try:
        text = keys.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: shown with U+FFFD, as the broker's source does
        text = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _attributes(column: pa.Array | None, rows: int) -> pa.Array:
    """The attribute maps (empty where an entry has none)."""
    if column is None:
        offsets = pa.repeat(pa.scalar(0, pa.int32()), rows + 1)
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty, type=_TEXT_MAP)
    bounds, names, values = [0], list[str](), list[str]()
    for raw in column.to_pylist():
        if raw:
            mapping = json.loads(raw)
            names += mapping.keys()
            values += mapping.values()
        bounds.append(len(names))
    return pa.MapArray.from_arrays(
        pa.array(bounds, pa.int32()), pa.array(names, pa.string()),
        pa.array(values, pa.string()), type=_TEXT_MAP)


@dataclass(frozen=True, slots=True)
class StagedRows:
    """One part to stage: its layout (``p`` bodies alone, ``m`` four fields a message,
    ``e`` those and an error text: rows for the dead letters) and its values."""

    layout: str
    values: list[Any]
    rows: int


def staged_rows(batch: pa.RecordBatch) -> list[StagedRows]:
    """The parts of one sink batch (the columns of `runtime.spark._arrow.sink_batch`):
    one ``p`` part when no row has a key or attributes, else an ``m`` part; rows with an
    error text go to an ``e`` part."""
    names = set(batch.schema.names)
    errors = batch.column("error").to_pylist() if "error" in names else None
    payloads = batch.column("payload").to_pylist()
    if "key" not in names and "attributes" not in names and errors is None:
        return [StagedRows("p", payloads, len(payloads))]
    keys = _texts(batch.column("key").to_pylist()) if "key" in names else [""] * len(payloads)
    maps = (batch.column("attributes").to_pylist() if "attributes" in names
            else [None] * len(payloads))
    fields = [(p, "m", k, json.dumps(dict(a)) if a else "") for p, k, a in zip(
        payloads, keys, maps, strict=True)]
    if errors is None:
        return [StagedRows("m", [v for row in fields for v in row], len(fields))]
    good = [row for row, error in zip(fields, errors, strict=True) if error is None]
    bad = [(*row, optional(error)) for row, error in zip(fields, errors, strict=True) if error is not None]
    parts = [StagedRows("m", [v for row in good for v in row], len(good))] if good else []
    if bad:
        parts.append(StagedRows("e", [v for row in bad for v in row], len(bad)))
    return parts


def _texts(keys: list[Any]) -> list[Any]:
    """Keys as stream field values: a string as it is, binary as it is, none as ``""``."""
    return ["" if k is None else k for k in keys]
