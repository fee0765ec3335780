"""A range of leased rows as Spark reads it: one Arrow IPC stream.

`lease_ipc` serves a range to Spark as one Arrow IPC stream: the
columns go into Arrow arrays in C loops, and the reply crosses the wire as a single
``bytes`` value, so neither side walks one Python object per row (no reply check, no
restricted-unpickler audit of a row list). pyarrow is imported on first use: a broker
that serves no Spark query never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.broker.lease._record import COLUMNS, LeaseColumns

__all__ = ["END_KEY", "lease_ipc"]

END_KEY = b"actorbus.end"


def lease_ipc(columns: LeaseColumns, end: int | None = None) -> bytes:
    """``columns`` as one Arrow IPC stream of one record batch, in `COLUMNS` order:
    string, string, binary, map<string,string>, timestamp[us, UTC], int32.

    ``end``, when given, is stored in the schema's metadata (``END_KEY``): the offset
    the batch covers up to, where the reader's next fetch starts.

    Keys that are not valid UTF-8 (binary sink keys kept with ``surrogateescape``)
    have their bad bytes replaced: Arrow strings must be UTF-8.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    ids, keys, payloads, attributes, times, attempts = columns
    arrays = [
        pa.array(ids, pa.string()),
        _key_array(pa, keys),
        pa.array(payloads, pa.binary()),
        _map_array(pa, attributes),
        _stamp_array(pa, pc, times),
        _int32_array(pa, attempts),
    ]
    metadata = None if end is None else {END_KEY: str(end)}
    batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
        [pa.field(name, array.type) for name, array in zip(COLUMNS, arrays, strict=True)],
        metadata=metadata))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _alike(values: Sequence[Any]) -> bool:
    """Whether every row holds the same value (most leases' attempts and publish times):
    the column is then one value repeated in C, not a list converted row by row."""
    return bool(values) and values.count(values[0]) == len(values)


def _int32_array(pa: Any, values: Sequence[int]) -> Any:
    if _alike(values):
        return pa.repeat(pa.scalar(values[0], pa.int32()), len(values))
    return pa.array(values, pa.int32())


def _stamp_array(pa: Any, pc: Any, times: Sequence[float]) -> Any:
    """Publish times (seconds) as timestamp[us, UTC], truncated toward zero."""
    kind = pa.timestamp("us", tz="UTC")
    if _alike(times):  # int() truncates as the cast does
        return pa.repeat(pa.scalar(int(times[0] * 1_000_000), kind), len(times))
    stamps = pc.multiply(pa.array(times, pa.float64()), 1_000_000)  # seconds -> us
    return stamps.cast(pa.int64(), safe=False).cast(kind)


def _key_array(pa: Any, keys: Sequence[str | None]) -> Any:
    if keys.count(None) == len(keys):  # no keys (most leases): no row to convert
        return pa.nulls(len(keys), pa.string())
    try:
        return pa.array(keys, pa.string())
    except UnicodeEncodeError:  # a lone surrogate: a binary key that is not UTF-8
        return pa.array([None if k is None else k.encode("utf-8", "surrogateescape").decode(
            "utf-8", "replace") for k in keys], pa.string())


def _map_array(pa: Any, attributes: Sequence[dict[str, str]]) -> Any:
    """The attribute maps as one Arrow map column; no per-row work when all are empty."""
    kind = pa.map_(pa.string(), pa.string())
    if not any(attributes):
        offsets = pa.repeat(pa.scalar(0, pa.int32()), len(attributes) + 1)
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty, type=kind)
    bounds, names, values = [0], list[str](), list[str]()
    for mapping in attributes:
        if mapping:  # None is no attributes
            names += mapping.keys()
            values += mapping.values()
        bounds.append(len(names))
    return pa.MapArray.from_arrays(
        pa.array(bounds, pa.int32()), pa.array(names, pa.string()), pa.array(values, pa.string()),
        type=kind)
