"""Reading an Arrow IPC stream a peer sent, without trusting a byte of it.

pyarrow reads an IPC stream as it is told: an offset that points past its values
buffer reads the memory behind it (heap contents become row values, or the process
dies of SIGSEGV), a compressed body is inflated before anything can look at its size,
and a dictionary makes a few bytes stand for as many rows as it likes. `read_batches`
refuses all of that before a single value is read:

- the first message is a schema, and the caller's check accepts it (names and types);
- every other message is an uncompressed record batch: a dictionary batch or a body
  compressed with LZ4 or ZSTD is refused from its metadata, before it is inflated (the
  metadata is a flatbuffer; the ``compression`` field of its ``RecordBatch`` table says
  so, see the Arrow format's ``Message.fbs``);
- each batch is read against that schema and checked with
  ``RecordBatch.validate(full=True)``: buffer sizes, offsets in range and
  monotonic, UTF-8 of strings, map keys not null.

An uncompressed batch's buffers are slices of its body, so what it holds is bounded by
the frame's own size; `decoded_size` adds what its rows cost once they are Python
objects.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

__all__ = ["ENTRY_COST", "ROW_COST", "decoded_size", "read_batches"]

# What one row costs the broker once decoded besides its value bytes (a bytes object, a
# slot in each column list, its share of the staged envelopes), and each attribute
# entry (two str objects and a dict slot): estimates that bound, not measure, memory.
ROW_COST = 96
ENTRY_COST = 128

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_MESSAGE_HEADER = 2  # Message: version, header_type, header, bodyLength, custom_metadata
_BATCH_COMPRESSION = 3  # RecordBatch: length, nodes, buffers, compression, variadic counts


def read_batches(data: bytes, check_schema: Callable[[Any], None]) -> tuple[Any, list[Any]]:
    """The schema and the validated record batches of the IPC stream ``data``.

    ``check_schema`` gets the stream's schema before any batch is read and raises
    `ValueError` to refuse it.

    Raises:
        ValueError: not an IPC stream, a schema refused, a dictionary or compressed
            batch, or a batch that fails full validation (the text says which).
    """
    import pyarrow as pa

    try:
        reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(data))
        first = reader.read_next_message()
        if first.type != "schema":
            raise ValueError(f"it starts with a {first.type} message, not a schema")
        schema = pa.ipc.read_schema(first)
        check_schema(schema)
        batches = []
        for message in reader:
            if message.type != "record batch":
                raise ValueError(f"a {message.type} message (only plain record batches)")
            if _compressed(message.metadata.to_pybytes()):
                raise ValueError("a compressed record batch (only uncompressed ones)")
            batch = pa.ipc.read_record_batch(message, schema)
            batch.validate(full=True)
            batches.append(batch)
    except StopIteration:
        raise ValueError("an empty stream (no schema)") from None
    except (pa.ArrowException, OSError, struct.error) as exc:
        raise ValueError(f"not a valid Arrow IPC stream: {exc}") from exc
    return schema, batches


def decoded_size(batch: Any, map_columns: tuple[str, ...] = ()) -> int:
    """About how many bytes ``batch`` holds once its rows are Python objects: the bytes
    its buffers reference, `ROW_COST` per row and `ENTRY_COST` per entry of the map
    columns named."""
    size = int(batch.nbytes) + ROW_COST * int(batch.num_rows)
    for name in map_columns:
        if name in batch.schema.names:
            column = batch.column(name)
            if hasattr(column, "keys"):
                size += ENTRY_COST * len(column.keys)
    return size


def _compressed(metadata: bytes) -> bool:
    """Whether the record batch message of flatbuffer ``metadata`` has a compressed body.

    Raises:
        ValueError: an offset points outside the metadata.
    """
    root = _read(_U32, metadata, 0)
    header = _field(metadata, root, _MESSAGE_HEADER)
    if header is None:
        raise ValueError("a record batch message without a header")
    batch = header + _read(_U32, metadata, header)
    return _field(metadata, batch, _BATCH_COMPRESSION) is not None


def _field(buffer: bytes, table: int, index: int) -> int | None:
    """The position of field ``index`` of the flatbuffer table at ``table`` (None: absent)."""
    vtable = table - _read(_I32, buffer, table)
    size = _read(_U16, buffer, vtable)
    slot = 4 + 2 * index
    if slot + 2 > size:
        return None
    offset = _read(_U16, buffer, vtable + slot)
    return table + int(offset) if offset else None


def _read(kind: struct.Struct, buffer: bytes, position: int) -> int:
    if position < 0 or position + kind.size > len(buffer):
        raise ValueError(f"its metadata points outside itself (at {position} of {len(buffer)})")
    value: int = kind.unpack_from(buffer, position)[0]
    return value
