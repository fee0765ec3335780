"""Frames on the broker connection: pickle out, an audited, restricted unpickler in.

Every frame is one pickle of builtin values (``None``, numbers, strings, bytes and the
builtin containers), exceptions, the value types `datetime`, `date`, `time`,
`timedelta`, `timezone`, `Decimal` and `UUID`, the runtime's own message types and the
plain classes (dataclasses, named tuples, enums) a user allowed by qualified name.
The decoder resolves globals against that allow-list only, and `_pickle_audit` walks
the opcodes first, so a frame can neither name any other callable (``os.system``,
``builtins.eval``, an arbitrary class) nor make loading cost more than its own size
(no ``bytearray(10**9)`` from 68 bytes, no hash-colliding sets): an authenticated peer
still cannot execute code or freeze the process.

Each frame starts with the call id it belongs to (`CALL_ID`, 8 bytes, big-endian), then
the pickle: a request carries the id its caller picked, its reply carries the same id,
so a reply always finds its call, also when the pickle is refused or replies come out of
order. Frames are bounded: a sender checks ``max_frame_size`` (the id included) before
sending; a peer announcing a longer frame is dropped by `multiprocessing.connection`
before the body is read.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import enum
import io
import pickle
import pickletools
import struct
import uuid
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from actors.errors import MessageNotSerializableError
from runtime.broker._pickle_audit import AuditError, audit

__all__ = [
    "CALL_ID",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_VALUE_TYPES",
    "FrameRefusedError",
    "MalformedFrameError",
    "NotTransferableError",
    "TypeRegistry",
    "decode",
    "encode",
    "framed",
    "unframed",
]

DEFAULT_MAX_FRAME_SIZE = 64 * 1024 * 1024
CALL_ID = struct.Struct("!Q")
_PROTOCOL = 5
DEFAULT_VALUE_TYPES: tuple[type, ...] = (
    datetime.datetime, datetime.date, datetime.time, datetime.timedelta, datetime.timezone,
    Decimal, uuid.UUID,
)
# Constructors REDUCE may call: their work is bounded by the frame's own bytes.
_REDUCIBLE_VALUES = frozenset({complex, *DEFAULT_VALUE_TYPES})


class FrameRefusedError(pickle.UnpicklingError):
    """A frame named a global outside the allow-list or broke the audit's rules."""


class MalformedFrameError(FrameRefusedError):
    """A frame was not a pickle at all, or not a request (its sender is dropped)."""


class NotTransferableError(MessageNotSerializableError):
    """A broker call carried a value or a frame the connection refuses; nothing was done.

    ``args`` are ``(operation, reason)``; the reason names the type or the size.
    """

    def __init__(self, operation: str = "", reason: str = "") -> None:
        super().__init__(operation, reason)

    def __str__(self) -> str:
        operation, reason = self.args
        return f"broker call {operation!r} refused: {reason}"


def _builtin_allowed(name: str) -> bool:
    if name == "complex":
        return True
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, Exception)


def plain_class(kind: object) -> type:
    """``kind`` when a user may allow it (a dataclass, named tuple or enum by qualified name).

    Raises:
        TypeError: anything else, or a class the other side cannot import by name.
    """
    plain = isinstance(kind, type) and (
        dataclasses.is_dataclass(kind) or issubclass(kind, enum.Enum)
        or (issubclass(kind, tuple) and hasattr(kind, "_fields")))
    if not plain:
        raise TypeError(f"allow= takes dataclasses, named tuples and enums, got {kind!r}")
    assert isinstance(kind, type)
    if "<locals>" in kind.__qualname__:
        raise TypeError(f"allow=: {kind.__qualname__} is defined inside a function; "
                        "define it at module level so both sides import it by name")
    return kind


class TypeRegistry:
    """The classes a frame may name besides the safe builtins (immutable once built).

    Args:
        types: the runtime's classes whose instances may cross (messages, stats,
            dead letters, errors).
        allow: the user's plain classes (see `plain_class`).

    Raises:
        TypeError: an ``allow`` entry is not a plain class.
    """

    __slots__ = ("_base", "_types", "_user")

    def __init__(self, types: Iterable[type], allow: Iterable[type] = ()) -> None:
        self._base = tuple(types)
        self._user = tuple(plain_class(kind) for kind in allow)
        every = (*self._base, *DEFAULT_VALUE_TYPES, *self._user)
        self._types = {(t.__module__, t.__qualname__): t for t in every}

    @property
    def allowed(self) -> list[str]:
        """The qualified names of the user's classes (what a peer sends to say what it reads)."""
        return [f"{t.__module__}.{t.__qualname__}" for t in self._user]

    def narrowed(self, names: Iterable[str]) -> TypeRegistry:
        """This allow-list less the user classes not in ``names`` (what a peer can read)."""
        accepted = set(names)
        return TypeRegistry(self._base, [t for t in self._user
                                         if f"{t.__module__}.{t.__qualname__}" in accepted])

    def resolve(self, module: str, name: str) -> Any:
        """The allowed object named ``module.name``.

        Raises:
            FrameRefusedError: the name is not on the allow-list.
        """
        if module == "builtins" and _builtin_allowed(name):
            return getattr(builtins, name)
        found = self._types.get((module, name))
        if found is None:
            raise FrameRefusedError(f"{module}.{name} is not on the broker's allow-list "
                                    "(plain classes can be added with allow=)")
        return found

    def reducible(self, target: Any) -> bool:
        """Whether a frame may call ``target`` (exceptions, bounded value constructors, enums)."""
        if not isinstance(target, type):
            return False
        if issubclass(target, Exception) or target in _REDUCIBLE_VALUES:
            return True
        return issubclass(target, enum.Enum) and target in self

    def __contains__(self, kind: type) -> bool:
        return self._types.get((kind.__module__, kind.__qualname__)) is kind


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, registry: TypeRegistry) -> None:
        super().__init__(io.BytesIO(data))
        self._registry = registry

    def find_class(self, module: str, name: str) -> Any:
        return self._registry.resolve(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise FrameRefusedError("persistent ids are not allowed")


def decode(data: bytes, registry: TypeRegistry) -> Any:
    """Audit ``data``, then unpickle it with the allow-list of ``registry``.

    Raises:
        FrameRefusedError: a disallowed global or operation (the text says which).
        MalformedFrameError: bytes that are not a valid pickle.
    """
    try:
        audit(data, registry.resolve, registry.reducible)
        return _RestrictedUnpickler(data, registry).load()
    except (FrameRefusedError, AuditError) as exc:
        # The audit stops at the first refused opcode; garbage whose first bytes happen to
        # read as one is still garbage, and its sender is dropped, not answered.
        if not _well_formed(data):
            raise MalformedFrameError(f"not a valid frame ({exc})") from None
        if isinstance(exc, FrameRefusedError):
            raise
        raise FrameRefusedError(str(exc)) from None
    except Exception as exc:  # any malformed pickle: truncated, bad opcode, bad state
        raise MalformedFrameError(f"not a valid frame ({exc!r})") from exc


def _well_formed(data: bytes) -> bool:
    """Whether ``data`` parses as opcodes up to one STOP that is its last byte."""
    stream = io.BytesIO(data)
    while byte := stream.read(1):
        opcode = _OPCODES.get(byte[0])
        if opcode is None:
            return False
        try:
            if opcode.name in _LINES:  # their readers unescape (and warn); only the ends matter
                if not all(stream.readline().endswith(b"\n") for _ in range(_LINES[opcode.name])):
                    return False
            elif opcode.arg is not None:
                opcode.arg.reader(stream)
        except Exception:  # a truncated or unreadable argument: not a pickle
            return False
        if opcode.name == "STOP":
            return stream.tell() == len(data)
    return False


_LINES = {"STRING": 1, "PERSID": 1, "GLOBAL": 2, "INST": 2}
_OPCODES = {ord(opcode.code): opcode for opcode in pickletools.opcodes}


def encode(value: object, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, operation: str = "") -> bytes:
    """Pickle ``value`` for the wire (protocol 5) and check its size.

    Raises:
        NotTransferableError: ``value`` does not pickle, or its frame is longer than
            ``max_frame_size``.
    """
    return _bounded(_pickled(value, operation), max_frame_size, operation)


def _pickled(value: object, operation: str) -> bytes:
    try:
        return pickle.dumps(value, protocol=_PROTOCOL)
    except Exception as exc:  # PicklingError, TypeError, AttributeError: all say what
        raise NotTransferableError(operation, f"cannot pickle it: {exc}") from exc


def _bounded(data: bytes, max_frame_size: int, operation: str) -> bytes:
    if len(data) > max_frame_size:
        raise NotTransferableError(
            operation, f"its frame is {len(data)} bytes, over max_frame_size={max_frame_size}")
    return data


def framed(
    call_id: int, value: object, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, operation: str = "",
) -> bytes:
    """One frame: ``call_id``, then ``value`` pickled (`encode`), at most ``max_frame_size`` bytes.

    Raises:
        NotTransferableError: ``value`` does not pickle, or the frame would be too long.
    """
    return _bounded(CALL_ID.pack(call_id) + _pickled(value, operation), max_frame_size, operation)


def unframed(data: bytes) -> tuple[int, bytes]:
    """``(call_id, pickle)`` of one frame (decode the pickle with `decode`).

    Raises:
        MalformedFrameError: shorter than a call id.
    """
    if len(data) <= CALL_ID.size:
        raise MalformedFrameError(f"not a valid frame ({len(data)} bytes, no call id and pickle)")
    return CALL_ID.unpack_from(data)[0], data[CALL_ID.size:]
