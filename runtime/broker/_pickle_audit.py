"""A walk over a frame's pickle opcodes that bounds what loading it may cost.

The restricted unpickler decides which globals a frame may name; this walk decides
what the frame may *do* with them, before a single object is built. It follows the
unpickler's stack abstractly (the kind of each item, not its value) and refuses:

- calls (``REDUCE``) of anything but exceptions and the value types whose
  constructors do bounded work on their arguments (`complex`, the `datetime` family,
  `Decimal`, enums): no ``bytearray(10**9)``, ``list(range(...))`` from 68 bytes;
- ``NEWOBJ`` of anything but an allowed class, ``BUILD`` of anything but an object the
  frame made itself (never a class: that would rewrite the server's classes);
- more than `MAX_UNSALTED_KEYS` set members and dict keys whose hash the sender
  chooses. ``str`` and ``bytes`` hashes are salted per process and small ints never
  share a hash, so they are free; big ints, floats, tuples, frozensets and objects
  can all be made to share one, and inserting ``n`` of those costs ``n * n`` probes;
- memo indices beyond the memo (the C unpickler grows its memo to the index given),
  persistent ids, extension codes, out-of-band buffers and the protocol 0/1 class
  opcodes ``INST`` and ``OBJ``.

The walk is linear in the frame and runs in Python; what it lets through loads in
time and memory proportional to the frame.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["MAX_UNSALTED_KEYS", "AuditError", "audit"]

# 4096 colliding keys cost ~0.1 s of probing; 40,000 cost ~8 s (quadratic).
MAX_UNSALTED_KEYS = 4096
_HASH_MODULUS = (1 << 61) - 1  # ints below it hash to themselves (-1 excepted)

_MARK = ("mark", None)
_ATOM = ("atom", None)  # floats, tuples, frozensets, bytearrays: hashable, unsalted
_SALTED = ("salted", None)  # str, bytes, None, True, False, small ints
_STRINGS = frozenset({
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
})
_INTS = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"})
_REFUSED = frozenset({
    "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4", "INST", "OBJ", "NEXT_BUFFER",
    "READONLY_BUFFER",
})

Item = tuple[str, Any]


class AuditError(Exception):
    """The frame would do more than build plain values; the text says what.

    Frames a pickler cannot produce (a stack underflow, a memo index never stored)
    raise `ValueError` instead: they are malformed, not refused.
    """


def audit(data: bytes, resolve: Callable[[str, str], Any], reducible: Callable[[Any], bool]) -> None:
    """Walk the opcodes of ``data`` and refuse what loading must not do.

    Args:
        data: one pickle.
        resolve: ``(module, name) -> object``; raises for a disallowed global.
        reducible: whether ``REDUCE`` may call the resolved object.

    Raises:
        AuditError: the frame breaks one of the rules of this module.
        ValueError: ``data`` is not a pickle (truncated, an unknown opcode, a stack
            or memo no pickler makes).
    """
    _Walk(resolve, reducible).run(_opcodes(data))


def _opcodes(data: bytes) -> Iterator[tuple[str, Any]]:
    """``(name, argument)`` of each opcode; arguments the walk never reads are None.

    `pickletools.genops` does the same at a tenth of the speed; this reader decodes
    only ints and short strings, and leaves the rare text opcodes to `pickletools`.
    """
    end, pos = len(data), 0
    while pos < end:
        code = data[pos]
        spec = _SPECS.get(code)
        if spec is None:
            raise ValueError(f"unknown opcode {code:#x} at {pos}")
        name, reader = spec
        arg, pos = reader(data, pos + 1)
        if pos > end:
            raise ValueError(f"truncated {name} at {pos}")
        yield name, arg
        if name == "STOP":
            return
    raise ValueError("no STOP opcode")


class _Walk:
    __slots__ = ("_memo", "_reducible", "_resolve", "_stack", "_unsalted")

    def __init__(self, resolve: Callable[[str, str], Any], reducible: Callable[[Any], bool]) -> None:
        self._resolve = resolve
        self._reducible = reducible
        self._stack: list[Item] = []
        self._memo: dict[int, Item] = {}
        self._unsalted = 0

    def run(self, ops: Iterator[tuple[str, Any]]) -> None:
        handlers = {name: getattr(self, method) for name, method in _HANDLERS.items()}
        stack = self._stack
        for name, arg in ops:
            handler = handlers.get(name)
            if handler is not None:
                handler(arg)
            elif name in _STRINGS:
                stack.append(("str", arg) if isinstance(arg, str) else _SALTED)
            elif name in _INTS:
                stack.append(_int_item(arg))
            elif name in _REFUSED:
                raise AuditError(f"opcode {name} is not allowed")
            else:
                self._generic(*_EFFECTS[name])

    def _generic(self, takes_mark: bool, pops: int, pushes: int) -> None:
        """Opcodes that only build plain values: pop what they take, push atoms."""
        if takes_mark:
            self._pop_mark()
        self._pop(pops)
        self._stack.extend([_ATOM] * pushes)

    def _pop(self, count: int) -> list[Item]:
        if count == 0:
            return []
        if count > len(self._stack):
            raise ValueError("stack underflow")
        taken = self._stack[-count:]
        del self._stack[-count:]
        if _MARK in taken:
            raise ValueError("a mark where a value was expected")
        return taken

    def _pop_mark(self) -> list[Item]:
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index] is _MARK:
                taken = self._stack[index + 1:]
                del self._stack[index:]
                return taken
        raise ValueError("no mark on the stack")

    def _top(self, kind: str, what: str) -> None:
        if not self._stack or self._stack[-1][0] != kind:
            raise AuditError(f"{what} applied to something that is not a {kind}")

    def _keys(self, keys: list[Item]) -> None:
        for key in keys:
            if key[0] not in ("str", "salted"):
                self._unsalted += 1
        if self._unsalted > MAX_UNSALTED_KEYS:
            raise AuditError(
                f"more than {MAX_UNSALTED_KEYS} set members or dict keys that are not "
                "str, bytes or small ints")

    def mark(self, _: Any) -> None:
        self._stack.append(_MARK)

    def list_(self, _: Any) -> None:
        self._pop_mark()
        self._stack.append(("list", None))

    def set_items(self, _: Any) -> None:
        items = self._pop_mark()
        self._top("dict", "SETITEMS")
        self._keys(items[0::2])

    def set_item(self, _: Any) -> None:
        key, _value = self._pop(2)
        self._top("dict", "SETITEM")
        self._keys([key])

    def dict_(self, _: Any) -> None:
        items = self._pop_mark()
        self._keys(items[0::2])
        self._stack.append(("dict", None))

    def add_items(self, _: Any) -> None:
        items = self._pop_mark()
        self._top("set", "ADDITEMS")
        self._keys(items)

    def frozenset_(self, _: Any) -> None:
        self._keys(self._pop_mark())
        self._stack.append(_ATOM)

    def appends(self, _: Any) -> None:
        self._pop_mark()
        self._top("list", "APPENDS")

    def append(self, _: Any) -> None:
        self._pop(1)
        self._top("list", "APPEND")

    def global_(self, arg: Any) -> None:
        module, _, name = str(arg).partition(" ")
        self._stack.append(("global", self._resolve(module, name)))

    def stack_global(self, _: Any) -> None:
        module, name = self._pop(2)
        if module[0] != "str" or name[0] != "str":
            raise ValueError("STACK_GLOBAL takes two strings")
        self._stack.append(("global", self._resolve(module[1], name[1])))

    def reduce(self, _: Any) -> None:
        callee, _args = self._pop(2)
        if callee[0] != "global" or not self._reducible(callee[1]):
            raise AuditError(f"REDUCE may not call {_describe(callee)}")
        self._stack.append(("object", callee[1]))

    def new_object(self, _: Any, arg_count: int = 1) -> None:
        cls = self._pop(1 + arg_count)[0]
        if cls[0] != "global" or not isinstance(cls[1], type):
            raise AuditError(f"NEWOBJ of {_describe(cls)}")
        self._stack.append(("object", cls[1]))

    def new_object_ex(self, arg: Any) -> None:
        self.new_object(arg, 2)

    def empty_dict(self, _: Any) -> None:
        self._stack.append(("dict", None))

    def empty_set(self, _: Any) -> None:
        self._stack.append(("set", None))

    def empty_list(self, _: Any) -> None:
        self._stack.append(("list", None))

    def constant(self, _: Any) -> None:
        self._stack.append(_SALTED)

    def build(self, _: Any) -> None:
        self._pop(1)
        self._top("object", "BUILD")

    def memo_put(self, index: Any) -> None:
        if not self._stack or not isinstance(index, int) or index > len(self._memo):
            raise ValueError("memo index out of range")
        self._memo[index] = self._stack[-1]

    def memoize(self, _: Any) -> None:
        if not self._stack:
            raise ValueError("MEMOIZE of an empty stack")
        self._memo[len(self._memo)] = self._stack[-1]

    def memo_get(self, index: Any) -> None:
        item = self._memo.get(index)
        if item is None:
            raise ValueError("memo index never stored")
        self._stack.append(item)

    def pop_mark(self, _: Any) -> None:
        self._pop_mark()

    def pop(self, _: Any) -> None:
        if self._stack and self._stack[-1] is _MARK:
            self._stack.pop()
        else:
            self._pop(1)

    def dup(self, _: Any) -> None:
        self._top_any()
        self._stack.append(self._stack[-1])

    def _top_any(self) -> None:
        if not self._stack:
            raise ValueError("stack underflow")


def _int_item(value: Any) -> Item:
    if isinstance(value, int) and -_HASH_MODULUS < value < _HASH_MODULUS and value != -1:
        return _SALTED
    return _ATOM


def _describe(item: Item) -> str:
    kind, value = item
    if kind == "global":
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
    return f"a {kind}"


_HANDLERS = {
    "MARK": "mark", "SETITEMS": "set_items", "SETITEM": "set_item", "DICT": "dict_",
    "ADDITEMS": "add_items", "FROZENSET": "frozenset_", "APPENDS": "appends", "APPEND": "append",
    "GLOBAL": "global_", "STACK_GLOBAL": "stack_global", "REDUCE": "reduce", "BUILD": "build",
    "PUT": "memo_put", "BINPUT": "memo_put", "LONG_BINPUT": "memo_put", "MEMOIZE": "memoize",
    "GET": "memo_get", "BINGET": "memo_get", "LONG_BINGET": "memo_get", "POP_MARK": "pop_mark",
    "POP": "pop", "DUP": "dup", "LIST": "list_", "EMPTY_DICT": "empty_dict",
    "EMPTY_SET": "empty_set", "EMPTY_LIST": "empty_list", "NONE": "constant",
    "NEWTRUE": "constant", "NEWFALSE": "constant", "NEWOBJ": "new_object",
    "NEWOBJ_EX": "new_object_ex",
}

Reader = Callable[[bytes, int], tuple[Any, int]]
_SHORT_TEXT = 1024  # longer strings cannot name a global; their text is not needed


def _fixed(size: int, signed: bool = False, value: bool = True) -> Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        stop = pos + size
        return (int.from_bytes(data[pos:stop], "little", signed=signed) if value else None), stop
    return read


def _sized(width: int, text: bool = False, signed: bool = False) -> Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        start = pos + width
        length = int.from_bytes(data[pos:start], "little", signed=signed)
        if length < 0:
            raise ValueError("negative length")
        stop = start + length
        if not text:
            return (_long(data[start:stop]) if signed else None), stop
        return (data[start:stop].decode("utf-8") if length <= _SHORT_TEXT else ""), stop
    return read


def _long(raw: bytes) -> int | None:
    return int.from_bytes(raw, "little", signed=True) if len(raw) <= 8 else None


def _long1(data: bytes, pos: int) -> tuple[Any, int]:
    stop = pos + 1 + data[pos] if pos < len(data) else pos + 1
    return _long(data[pos + 1:stop]), stop


def _text_reader(descriptor: pickletools.ArgumentDescriptor) -> Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        stream = io.BytesIO(data)
        stream.seek(pos)
        return descriptor.reader(stream), stream.tell()
    return read


def _specs() -> tuple[dict[int, tuple[str, Reader]], dict[str, tuple[bool, int, int]]]:
    readers: dict[str | None, Reader] = {
        None: lambda data, pos: (None, pos), "uint1": _fixed(1), "uint2": _fixed(2),
        "int4": _fixed(4, signed=True), "uint4": _fixed(4), "uint8": _fixed(8, value=False),
        "float8": _fixed(8, value=False), "long1": _long1, "long4": _sized(4, signed=True),
        "bytes1": _sized(1), "string1": _sized(1), "bytes4": _sized(4), "string4": _sized(4, signed=True),
        "bytes8": _sized(8), "bytearray8": _sized(8), "unicodestring1": _sized(1, text=True),
        "unicodestring4": _sized(4, text=True), "unicodestring8": _sized(8, text=True),
    }
    specs, effects = {}, {}
    for op in pickletools.opcodes:
        descriptor = op.arg
        reader = readers.get(descriptor.name if descriptor else None)
        specs[ord(op.code)] = (op.name, reader or _text_reader(descriptor))  # type: ignore[arg-type]
        before = op.stack_before
        mark = pickletools.markobject in before
        if mark:
            before = before[: before.index(pickletools.markobject)]
        effects[op.name] = (mark, len(before), len(op.stack_after))
    return specs, effects


_SPECS, _EFFECTS = _specs()
