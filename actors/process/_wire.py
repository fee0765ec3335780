"""What crosses a process actor's pipe: pickle for data, cloudpickle for code, batched frames.

Parent -> child frames are lists of ``(kind, seq, payload)``: ``"t"`` tell, ``"a"`` ask,
``"s"`` stop; payloads are pickled one by one at the sender (so a bad message fails
there, alone). Child -> parent frames are lists of tuples whose first item names them:
``("ready", pid)``, ``("start_failed", error)``, ``("r", seq, ok, payload)`` a reply,
``("d", seq)`` tells handled up to seq, ``("f", seq, error)`` a tell failed and the actor
restarted in place, ``("restarted",)``, ``("exit",)`` the actor stopped itself.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

from actors.errors import MessageNotSerializableError

__all__ = ["dump_code", "dump_error", "dump_message", "load"]

PROTOCOL = 5


def dump_message(name: str, message: Any) -> bytes:
    """Pickle a message for actor ``name``; refuse it with a typed error if it does not pickle."""
    try:
        return pickle.dumps(message, protocol=PROTOCOL)
    except Exception as exc:
        raise MessageNotSerializableError(name, f"{type(exc).__name__}: {exc}") from exc


def dump_code(obj: Any) -> bytes:
    """Pickle code (factories, handlers, lambdas) by value, once, at spawn."""
    return cloudpickle.dumps(obj, protocol=PROTOCOL)  # type: ignore[no-any-return]


def dump_error(exc: BaseException) -> bytes:
    """Pickle an exception, or a RuntimeError carrying its text when it does not pickle."""
    try:
        data = pickle.dumps(exc, protocol=PROTOCOL)
        pickle.loads(data)
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"), protocol=PROTOCOL)
    return data


def load(data: bytes) -> Any:
    """Unpickle a frame or a payload."""
    return pickle.loads(data)
