"""A walk over a frame's pickle opcodes that bounds what loading it may cost.

The restricted unpickler decides which globals a frame may name; this walk decides what
the frame may *do* with them, before any object is built. It follows the unpickler's
stack abstractly (each item's kind, not its value) and refuses (`AuditError`):

- ``REDUCE`` of anything but exceptions and constructors whose work is bounded by their
  arguments (`complex`, the `datetime` family, `Decimal`, enums): no
  ``bytearray(10**9)`` or ``list(range(...))`` from 68 bytes;
- ``NEWOBJ`` of anything but a class, ``BUILD`` of anything but an object the frame
  built (never a class: that would rewrite the server's classes);
- more than `MAX_UNSALTED_KEYS` set members and dict keys whose hash the sender picks.
  ``str``/``bytes`` hashes are salted per process and ints below 2**61 never share
  one; others can all share a hash, and ``n`` of those cost ``n * n`` probes;
- persistent ids, extension codes, out-of-band buffers, ``INST`` and ``OBJ``.

Frames no pickler makes (a stack underflow, a memo index past the memo, which the C
unpickler would grow to) raise `ValueError`: malformed. What passes loads in time and
memory proportional to the frame.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_UNSALTED_KEYS", "AuditError", "audit"]

# Colliding keys cost probes quadratic in their count: this many load in a fraction of a
# second, ten times as many hold the GIL for seconds. Re-measure: time `pickle.loads` of a
# set of n multiples of 2**61 - 1 (they all hash to 0) for n = this and ten times this.
MAX_UNSALTED_KEYS = 4096
_HASH_MODULUS = (1 << 61) - 1  # ints below it hash to themselves (-1 excepted)

# Abstract stack items: a str is a text constant (STACK_GLOBAL reads it); ("g", obj) a
# resolved global; ("o", cls) an object the frame built; the ints below, the rest.
_SALTED, _ATOM, _LIST, _DICT, _SET = 1, 2, 3, 4, 5
_MARK: Any = object()
_REFUSED = frozenset(b"PQ\x82\x83\x84io\x97\x98")
# BININT1, BININT2, BININT, BINFLOAT, FRAME, PROTO: fixed-size arguments
_INLINE_SIZE = {0x4B: 1, 0x4D: 2, 0x4A: 4, 0x47: 8, 0x95: 8, 0x80: 1}


class AuditError(Exception):
    """The frame would do more than build plain values; the text says what."""


def audit(data: bytes, resolve: Callable[[str, str], Any], reducible: Callable[[Any], bool]) -> None:
    """Walk the opcodes of ``data`` and refuse what loading must not do.

    Args:
        data: one pickle.
        resolve: ``(module, name) -> object``; raises for a disallowed global.
        reducible: whether ``REDUCE`` may call the resolved object.

    Raises:
        AuditError: the frame breaks one of the rules of this module.
        ValueError: ``data`` is not a pickle a pickler makes (truncated, an unknown
            opcode, a stack or memo out of step).
    """
    try:
        _walk(data, resolve, reducible)
    except IndexError:  # popping an empty stack, reading past the end
        raise ValueError("truncated frame or stack underflow") from None


def _walk(data: bytes, resolve: Callable[[str, str], Any], reducible: Callable[[Any], bool]) -> None:
    # One long loop on purpose: the opcodes a pickler emits for every value are
    # handled inline (a call per opcode would double the walk's cost); the rest below.
    stack: list[Any] = []
    memo: list[Any] = []
    unsalted = [0]
    end, pos = len(data), 0
    while pos < end:
        op = data[pos]
        pos += 1
        if op == 0x94:  # MEMOIZE
            memo.append(stack[-1])
        elif op == 0x8C or op == 0x43 or op == 0x55:  # SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING
            start = pos + 1
            pos = start + data[pos]
            stack.append(data[start:pos].decode("utf-8") if op == 0x8C else _SALTED)
        elif op in _INLINE_SIZE:
            size = _INLINE_SIZE[op]
            if op == 0x4A or op == 0x4B or op == 0x4D:
                value = int.from_bytes(data[pos:pos + size], "little", signed=op == 0x4A)
                stack.append(_SALTED if value != -1 else _ATOM)
            elif op == 0x47:
                stack.append(_ATOM)
            pos += size
        elif op == 0x68 or op == 0x6A:  # BINGET, LONG_BINGET
            size = 1 if op == 0x68 else 4
            stack.append(memo[int.from_bytes(data[pos:pos + size], "little")])
            pos += size
        elif op == 0x28:  # MARK
            stack.append(_MARK)
        elif op in (0x4E, 0x88, 0x89):  # NONE, NEWTRUE, NEWFALSE
            stack.append(_SALTED)
        elif op in (0x7D, 0x5D, 0x8F):  # EMPTY_DICT, EMPTY_LIST, EMPTY_SET
            stack.append(_DICT if op == 0x7D else _LIST if op == 0x5D else _SET)
        elif op in (0x29, 0x85, 0x86, 0x87):  # EMPTY_TUPLE, TUPLE1..3
            _pop(stack, op - 0x84 if op != 0x29 else 0)
            stack.append(_ATOM)
        elif op == 0x74:  # TUPLE
            _pop_mark(stack)
            stack.append(_ATOM)
        elif op == 0x73:  # SETITEM: the common case of `_collect`, inline
            value, key = stack.pop(), stack.pop()
            if value is _MARK or key is _MARK or stack[-1] != _DICT:
                raise AuditError("SETITEM applied to something that is not a dict")
            if key != _SALTED and type(key) is not str:
                _count(unsalted, 1)
        elif op == 0x81:  # NEWOBJ
            _pop(stack, 1)
            cls = stack.pop()
            if not (type(cls) is tuple and cls[0] == "g" and isinstance(cls[1], type)):
                raise AuditError(f"NEWOBJ of {_describe(cls)}")
            stack.append(("o", cls[1]))
        elif op == 0x62:  # BUILD
            if stack.pop() is _MARK or not (type(stack[-1]) is tuple and stack[-1][0] == "o"):
                raise AuditError(f"BUILD applied to {_describe(stack[-1])}")
        elif op == 0x2E:  # STOP
            if pos != end:
                raise ValueError("bytes after the STOP opcode")
            return
        else:
            pos = _rare(op, data, pos, stack, memo, unsalted, resolve, reducible)
        if pos > end:
            raise ValueError("truncated frame")
    raise ValueError("no STOP opcode")


def _rare(
    op: int, data: bytes, pos: int, stack: list[Any], memo: list[Any], unsalted: list[int],
    resolve: Callable[[str, str], Any], reducible: Callable[[Any], bool],
) -> int:
    """Every other opcode; returns the position after it."""
    if op in _COLLECTING:
        _collect(op, stack, unsalted)
    elif op == 0x93:  # STACK_GLOBAL
        name, module = stack.pop(), stack.pop()
        if type(module) is not str or type(name) is not str:
            raise ValueError("STACK_GLOBAL takes two strings")
        stack.append(("g", resolve(module, name)))
    elif op == 0x92:  # NEWOBJ_EX (NEWOBJ: inline)
        _pop(stack, 2)
        cls = stack.pop()
        if not (type(cls) is tuple and cls[0] == "g" and isinstance(cls[1], type)):
            raise AuditError(f"NEWOBJ of {_describe(cls)}")
        stack.append(("o", cls[1]))
    elif op == 0x52:  # REDUCE
        _pop(stack, 1)
        callee = stack.pop()
        if not (type(callee) is tuple and callee[0] == "g" and reducible(callee[1])):
            raise AuditError(f"REDUCE may not call {_describe(callee)}")
        stack.append(("o", callee[1]))
    elif op in _SIZED:
        return _sized(op, data, pos, stack)
    elif op in (0x71, 0x72):  # BINPUT, LONG_BINPUT
        size = 1 if op == 0x71 else 4
        _memo_put(memo, int.from_bytes(data[pos:pos + size], "little"), stack)
        pos += size
    elif op in _TEXT:
        return _text(op, data, pos, stack, memo, resolve)
    else:
        _plain(op, stack)
    return pos


def _sized(op: int, data: bytes, pos: int, stack: list[Any]) -> int:
    """Opcodes with a length-prefixed argument: long ints, texts, bytes, bytearrays."""
    width, signed, kind = _SIZED[op]
    length = int.from_bytes(data[pos:pos + width], "little", signed=signed)
    if length < 0:
        raise ValueError("negative length")
    start, pos = pos + width, pos + width + length
    if kind == "long":
        stack.append(_long_item(data[start:pos]))
    elif kind == "text" and length <= 1024:  # longer ones cannot name a global
        stack.append(data[start:pos].decode("utf-8"))
    else:
        stack.append(_ATOM if kind == "array" else _SALTED)
    return pos


def _plain(op: int, stack: list[Any]) -> None:
    if op in _REFUSED:
        raise AuditError(f"opcode {_NAMES.get(op, hex(op))} is not allowed")
    if op == 0x30:  # POP
        stack.pop()
    elif op == 0x31:  # POP_MARK
        _pop_mark(stack)
    elif op == 0x32:  # DUP
        stack.append(stack[-1])
    elif op == 0x6C:  # LIST
        _pop_mark(stack)
        stack.append(_LIST)
    else:
        raise ValueError(f"unknown opcode {op:#x}")


def _collect(op: int, stack: list[Any], unsalted: list[int]) -> None:
    """SETITEM(S), DICT, ADDITEMS, FROZENSET, APPEND(S): check targets, count keys."""
    if op == 0x73:  # SETITEM
        _pop(stack, 1)
        keys = [stack.pop()]
    elif op == 0x61:  # APPEND
        _pop(stack, 1)
        keys = []
    else:
        items = _pop_mark(stack)
        keys = items[0::2] if op in (0x75, 0x64) else items if op in (0x90, 0x91) else []
    target = _TARGETS.get(op)
    if target is not None and stack[-1] != target:
        raise AuditError(f"{_NAMES[op]} applied to {_describe(stack[-1])}")
    if op == 0x64:
        stack.append(_DICT)
    elif op == 0x91:
        stack.append(_ATOM)
    _count(unsalted, sum(1 for key in keys if key != _SALTED and type(key) is not str))


def _count(unsalted: list[int], more: int) -> None:
    unsalted[0] += more
    if unsalted[0] > MAX_UNSALTED_KEYS:
        raise AuditError(f"more than {MAX_UNSALTED_KEYS} set members or dict keys that are not "
                         "str, bytes or ints below 2**61")


def _text(op: int, data: bytes, pos: int, stack: list[Any], memo: list[Any],
          resolve: Callable[[str, str], Any]) -> int:
    """The protocol-0 opcodes with newline-terminated arguments (INST, PERSID: refused)."""
    stream = io.BytesIO(data)
    stream.seek(pos)
    if op == 0x63:  # GLOBAL; not `pickletools`' readers: they unescape, and warn per bad escape
        module, name = _line(stream).decode("utf-8"), _line(stream).decode("utf-8")
        stack.append(("g", resolve(module, name)))
    elif op == 0x53:  # STRING: its text only if it has no escapes (all a name may use)
        line = _line(stream)
        if len(line) < 2 or line[0] not in b"'\"" or line[-1] != line[0]:
            raise ValueError("STRING argument not quoted")
        inner = line[1:-1]
        stack.append(_SALTED if b"\\" in inner or not inner.isascii() else inner.decode("ascii"))
    elif op in (0x70, 0x67, 0x49, 0x4C, 0x56, 0x46):  # PUT, GET, INT, LONG, UNICODE, FLOAT
        _plain_text(op, _TEXT[op].reader(stream), stack, memo)
    else:
        raise AuditError(f"opcode {_NAMES[op]} is not allowed")
    return stream.tell()


def _plain_text(op: int, arg: Any, stack: list[Any], memo: list[Any]) -> None:
    if op == 0x70:  # PUT
        _memo_put(memo, int(arg), stack)
    elif op == 0x67:  # GET
        if not 0 <= int(arg) < len(memo):
            raise ValueError("memo index never stored")
        stack.append(memo[int(arg)])
    elif op in (0x49, 0x4C):  # INT, LONG
        stack.append(_SALTED if isinstance(arg, int) and -_HASH_MODULUS < arg < _HASH_MODULUS
                     and arg != -1 else _ATOM)
    else:  # UNICODE (a str), FLOAT
        stack.append(arg if isinstance(arg, str) else _ATOM)


def _line(stream: io.BytesIO) -> bytes:
    line = stream.readline()
    if not line.endswith(b"\n"):
        raise ValueError("truncated frame")
    return line[:-1]


def _memo_put(memo: list[Any], index: int, stack: list[Any]) -> None:
    if index > len(memo):
        raise ValueError("memo index out of range")
    if index == len(memo):
        memo.append(stack[-1])
    else:
        memo[index] = stack[-1]


def _pop(stack: list[Any], count: int) -> None:
    for _ in range(count):
        if stack.pop() is _MARK:
            raise ValueError("a mark where a value was expected")


def _pop_mark(stack: list[Any]) -> list[Any]:
    for index in range(len(stack) - 1, -1, -1):
        if stack[index] is _MARK:
            taken = stack[index + 1:]
            del stack[index:]
            return taken
    raise ValueError("no mark on the stack")


def _long_item(raw: bytes) -> Any:
    if len(raw) > 8:
        return _ATOM
    value = int.from_bytes(raw, "little", signed=True)
    return _SALTED if -_HASH_MODULUS < value < _HASH_MODULUS and value != -1 else _ATOM


def _describe(item: Any) -> str:
    if type(item) is tuple and item[0] == "g":
        value = item[1]
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
    if type(item) is tuple:
        return f"an object of {item[1].__qualname__}"
    names = {_LIST: "a list", _DICT: "a dict", _SET: "a set"}
    return "a str" if type(item) is str else names.get(item, "a value")


_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}
_TEXT = {ord(op.code): op.arg for op in pickletools.opcodes
         if op.arg is not None and op.arg.n == pickletools.UP_TO_NEWLINE}
_COLLECTING = frozenset(b"sadue\x90\x91")  # SETITEM APPEND DICT SETITEMS APPENDS ADDITEMS FROZENSET
_TARGETS = {0x73: _DICT, 0x75: _DICT, 0x61: _LIST, 0x65: _LIST, 0x90: _SET}
_SIZED = {  # opcode: (length width, signed length, kind)
    0x8A: (1, False, "long"), 0x8B: (4, True, "long"), 0x58: (4, False, "text"),
    0x8D: (8, False, "text"), 0x42: (4, False, "bytes"), 0x8E: (8, False, "bytes"),
    0x54: (4, True, "bytes"), 0x96: (8, False, "array"),
}
