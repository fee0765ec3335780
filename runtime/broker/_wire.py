"""Frames on the broker connection: pickle out, a restricted unpickler in.

Every frame is one pickle of builtin values (``None``, numbers, strings, bytes and the
builtin containers), builtin exceptions and the runtime's own message types. The
decoder resolves globals against an allow-list only, so a frame that names any other
callable (``os.system``, ``subprocess.Popen``, ``builtins.eval``, an arbitrary class) is
refused before anything runs: an authenticated peer still cannot execute code.

Frames are bounded: a peer announcing a longer frame than ``max_frame_size`` is dropped
by `multiprocessing.connection` before the body is read.
"""

from __future__ import annotations

import builtins
import io
import pickle
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameRefusedError",
    "TypeRegistry",
    "read_frame",
    "write_frame",
]

DEFAULT_MAX_FRAME_SIZE = 64 * 1024 * 1024
_PROTOCOL = 5
_SAFE_BUILTINS = frozenset({
    "bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int", "list",
    "range", "set", "slice", "str", "tuple",
})


class FrameRefusedError(pickle.UnpicklingError):
    """A frame named a global outside the allow-list, or was not a pickle at all."""


def _builtin_allowed(name: str) -> bool:
    if name in _SAFE_BUILTINS:
        return True
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


class TypeRegistry:
    """The classes a frame may name besides the safe builtins (immutable once built).

    Args:
        types: classes whose instances may cross the wire (the runtime's messages,
            stats, dead letters and errors).
    """

    __slots__ = ("_types",)

    def __init__(self, types: Iterable[type]) -> None:
        self._types = {(t.__module__, t.__qualname__): t for t in types}

    def resolve(self, module: str, name: str) -> Any:
        """The allowed object named ``module.name``.

        Raises:
            FrameRefusedError: the name is not on the allow-list.
        """
        if module == "builtins" and _builtin_allowed(name):
            return getattr(builtins, name)
        found = self._types.get((module, name))
        if found is None:
            raise FrameRefusedError(f"frame refused: global {module}.{name} is not allowed")
        return found

    def __contains__(self, kind: type) -> bool:
        return (kind.__module__, kind.__qualname__) in self._types


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, registry: TypeRegistry) -> None:
        super().__init__(io.BytesIO(data))
        self._registry = registry

    def find_class(self, module: str, name: str) -> Any:
        return self._registry.resolve(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise FrameRefusedError("frame refused: persistent ids are not allowed")


def decode(data: bytes, registry: TypeRegistry) -> Any:
    """Unpickle ``data`` with the allow-list of ``registry``.

    Raises:
        FrameRefusedError: a disallowed global, or bytes that are not a valid pickle.
    """
    try:
        return _RestrictedUnpickler(data, registry).load()
    except FrameRefusedError:
        raise
    except Exception as exc:  # any malformed pickle: truncated, bad opcode, bad state
        raise FrameRefusedError(f"frame refused: not a valid frame ({exc!r})") from exc


def encode(value: object) -> bytes:
    """Pickle ``value`` for the wire (protocol 5)."""
    return pickle.dumps(value, protocol=_PROTOCOL)


def read_frame(connection: Connection, registry: TypeRegistry, max_frame_size: int) -> Any:
    """Block until the next frame arrives and decode it.

    Raises:
        EOFError: the peer closed the connection.
        OSError: the frame is longer than ``max_frame_size`` (the connection is closed).
        FrameRefusedError: the frame is not an allowed pickle.
    """
    return decode(connection.recv_bytes(max_frame_size), registry)


def write_frame(connection: Connection, value: object) -> None:
    """Send ``value`` as one frame."""
    connection.send_bytes(encode(value))
