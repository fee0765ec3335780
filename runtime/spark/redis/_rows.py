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

__all__ = ["HeldSlice", "Limits", "StagedRows", "held_batch", "held_slice", "own_entries",
           "published_times", "staged_rows", "taken_slice"]

logger = logging.getLogger(__name__)
_TEXT_MAP = pa.map_(pa.string(), pa.string())


@dataclass(frozen=True, slots=True)
class Limits:
    """What an executor needs to dead-letter an entry it cannot turn into a row."""

    group: str
    consumer: str
    keys: list[str]
    dead_limit: int

    @classmethod
    def of(cls, settings: TopicSettings, keys: TopicKeys, group: str, consumer: str) -> Limits:
        """The limits of one partition's keys."""
        return cls(group, consumer, [*keys.settling(), keys.takes], settings.dead_letter_limit or 0)

    def bury(self, connection: Connection, entry_id: str, attempt: int, error: str) -> None:
        """Dead-letter one held entry with reason ``error``, once: a retried read task
        that takes the entry again only acks it (fenced on this consumer; no deadline
        check: the consumer still holds it)."""
        mark = json.dumps([self.group, self.consumer, "dead", entry_id])
        buried = connection.run("BURY_READ", self.keys, [
            self.group, self.consumer, entry_id, attempt, optional(error), self.dead_limit, mark])
        if buried == b"ok":
            logger.warning("actorbus source: dead-lettered entry %s of group %s: %s", entry_id,
                           self.group, error)


@dataclass(frozen=True, slots=True)
class HeldSlice:
    """Part of a consumer's pending entries, read with plain commands (no script: the
    reading runs on the executors, not on the Redis server's one thread).

    Attributes:
        attempts: each pending entry's delivery count, by entry id; None when the
            consumer holds every entry of the slice, each at its first attempt (the batch
            took that stretch of the stream whole).
        entries: the stream's entries from the first pending id to the last, as Redis
            sends them: ``[id, [field, value, ...]]``; an entry the consumer does not
            hold is not a row.
        last: the last pending id read: the next slice starts after it.
    """

    attempts: dict[bytes, int] | None
    entries: list[list[Any]]
    last: str


def held_slice(reader: Any, stream: str, group: str, consumer: str, after: str, upto: str,
               count: int) -> HeldSlice | None:
    """Up to ``count`` of ``consumer``'s pending entries after id ``after`` up to
    ``upto``, or None when it holds none there. ``reader``: a `Connection.plain_reader`
    of the stream (its replies unparsed)."""
    held = reader.execute_command("XPENDING", stream, group, f"({after}", upto, count, consumer)
    if not held:
        return None
    entries = reader.execute_command("XRANGE", stream, held[0][0], held[-1][0])
    return HeldSlice({p[0]: p[3] for p in held}, entries, held[-1][0].decode())


def taken_slice(reader: Any, stream: str, after: str, upto: str, count: int) -> HeldSlice | None:
    """Up to ``count`` entries of the stream after id ``after`` up to ``upto``, all held
    by the consumer at their first attempt, or None when there are none. ``reader``: as
    for `held_slice`."""
    entries = reader.execute_command("XRANGE", stream, f"({after}", upto, "COUNT", count)
    if not entries:
        return None
    return HeldSlice(None, entries, entries[-1][0].decode())


def own_entries(entries: list[list[Any]], group: str) -> tuple[list[list[Any]], list[bytes]]:
    """The entries ``group`` reads, and the ids of replays meant for another group (an
    ``o`` field naming it), which it only acks."""
    if all(len(fields) == 2 for _, fields in entries):  # a body alone: no replay (most)
        return entries, []
    mine, others, name = [], [], group.encode()
    for entry in entries:
        fields = entry[1]
        origin = next((fields[i + 1] for i in range(0, len(fields), 2) if fields[i] == b"o"), None)
        if origin is None or origin == name:
            mine.append(entry)
        else:
            others.append(entry[0])
    return mine, others


def held_batch(held: HeldSlice, limits: Limits, connection: Connection,
               schema: StructType) -> pa.RecordBatch:
    """The rows of one slice in exactly Spark's Arrow schema. An entry whose body is no
    payload (refused by the restricted unpickler, or an object JSON cannot encode) is
    dead-lettered ``error`` and left out; so is a held entry deleted from the stream."""
    attempts = held.attempts
    entries = held.entries if attempts is None else [e for e in held.entries if e[0] in attempts]
    ids = [entry_id for entry_id, _ in entries]
    # A body alone: a Message with neither key nor attributes, not replayed (most)
    bodies = [fields[1] for _, fields in entries if len(fields) == 2 and fields[0] == b"b"]
    if len(bodies) == len(entries):
        message_ids = ids
        keys, attributes = pa.nulls(len(ids), pa.string()), _attributes([None] * len(ids))
    else:
        named = _decoded([(i, dict(zip(f[::2], f[1::2], strict=True))) for i, f in entries],
                         attempts, limits, connection)
        ids = [entry_id for entry_id, _ in named]
        message_ids = [fields.get(b"r") or entry_id for entry_id, fields in named]
        bodies = [fields.get(b"b", b"") for _, fields in named]
        keys = _keys([fields.get(b"k") or None for _, fields in named])
        attributes = _attributes([fields.get(b"a") for _, fields in named])
    text_ids = pa.array(message_ids, pa.binary()).cast(pa.string())
    columns = {
        "message_id": text_ids,
        "key": keys,
        "payload": pa.array(bodies, pa.binary()),
        "attributes": attributes,
        "published_at": published_times(text_ids),
        "attempt": (pa.repeat(pa.scalar(1, pa.int32()), len(ids)) if attempts is None
                    else pa.array([attempts[i] for i in ids], pa.int32())),
    }
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    arrays = [columns[field.name] for field in arrow_schema]
    return pa.RecordBatch.from_arrays(
        [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, arrow_schema, strict=True)],
        schema=arrow_schema)


def published_times(ids: pa.Array) -> pa.Array:
    """The time each stream entry id holds (its milliseconds part), as Spark's UTC
    timestamps."""
    millis = pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 0)
    return pc.multiply(millis.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))


def _decoded(entries: list[tuple[bytes, dict[bytes, bytes]]], attempts: dict[bytes, int] | None,
             limits: Limits, connection: Connection) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The entries with each pickled body replaced by its payload bytes; an entry whose
    body cannot be decoded is dead-lettered and left out."""
    codec, kept = Codec(), []
    for entry_id, fields in entries:
        if fields.get(b"f", b"m") != b"m":
            message_id = (fields.get(b"r") or entry_id).decode()
            try:
                message, _, _ = codec.message(message_id, fields)
                fields = fields | {b"b": encode_payload(message), b"f": b"m"}
            except (UndecodableError, PayloadError) as exc:
                limits.bury(connection, entry_id.decode(),
                            1 if attempts is None else attempts[entry_id], str(exc))
                continue
        kept.append((entry_id, fields))
    return kept


def _keys(keys: list[bytes | None]) -> pa.Array:
    """Keys as text (none where an entry has none); a key that is not UTF-8 is shown
    with U+FFFD, as the broker's source does."""
    binary = pa.array(keys, pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if k is None else k.decode("utf-8", "replace") for k in keys],
                        pa.string())


def _attributes(column: list[bytes | None]) -> pa.Array:
    """The attribute maps (empty where an entry has none); no per-row work when no entry
    has any."""
    if not any(column):
        return pa.MapArray.from_arrays(
            pa.repeat(pa.scalar(0, pa.int32()), len(column) + 1), pa.array([], pa.string()),
            pa.array([], pa.string()), type=_TEXT_MAP)
    bounds, names, values = [0], list[str](), list[str]()
    for raw in column:
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
