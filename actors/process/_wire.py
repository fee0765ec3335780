"""The process wire protocol: what crosses a process actor's pipe, and how a child exits.

Data is pickled (protocol 5), code (factories, handlers, lambdas) cloudpickled once at
spawn. Each frame is one pickled list of tuples whose first item is its kind, below;
payloads inside are pickled one by one (a message at its sender, so a bad one fails
there, alone; a reply in the child, so a reply that does not load fails alone).
Kinds are short strings (they are on every item of every frame); exit codes are
`ExitCode`.
"""

from __future__ import annotations

import pickle
import traceback
from enum import IntEnum
from typing import Any, Final

import cloudpickle

from actors.errors import MessageNotSerializableError

__all__ = [
    "ASK", "DONE", "EXITED", "HEARTBEAT", "LOCAL_ASK", "LOCAL_EXIT", "LOCAL_TELL", "PROTOCOL",
    "READY", "REPLY", "RESTARTED", "START_FAILED", "STOP", "STOPPED", "TELL", "TELL_FAILED",
    "ExitCode", "dump_code", "dump_error", "dump_message", "load",
]

PROTOCOL: Final = 5

# -- parent -> child: (kind, seq, payload); seq numbers every item of one process ------
TELL: Final = "t"  # a tell; the child acknowledges it with DONE
ASK: Final = "a"  # an ask; the child answers it with REPLY
STOP: Final = "s"  # stop after the mail before it (payload None); the child ends with STOPPED

# -- inside the child only: its own queue's kinds besides TELL, ASK and STOP -----------
LOCAL_TELL: Final = "l"  # self.actor_ref.tell(message): payload is the message itself
LOCAL_ASK: Final = "la"  # self.actor_ref.ask(message): payload is (message, future)
LOCAL_EXIT: Final = "x"  # self.stop(): a normal exit; the child ends with EXITED

# -- child -> parent ------------------------------------------------------------------
READY: Final = "ready"  # (READY, pid): on_start returned; mail is handled from now on
START_FAILED: Final = "start_failed"  # (START_FAILED, error): on_start raised; exit 3 follows
REPLY: Final = "r"  # (REPLY, seq, ok, payload): an ask's result (ok) or its error
DONE: Final = "d"  # (DONE, seq): every tell up to seq was handled
TELL_FAILED: Final = "f"  # (TELL_FAILED, seq, error): a tell failed; the actor restarts in place
RESTARTED: Final = "restarted"  # (RESTARTED,): the fresh instance after TELL_FAILED runs
EXITED: Final = "exit"  # (EXITED,): the actor stopped itself; the process exits with 0
STOPPED: Final = "stopped"  # (STOPPED,): the child obeyed STOP; the process exits with 0
HEARTBEAT: Final = "hb"  # (HEARTBEAT,): a watched child is alive and its handler not stuck


class ExitCode(IntEnum):
    """How a process actor's process ends (anything else: it was killed or crashed)."""

    NORMAL = 0  # stopped or exited on request, or its parent is gone (pipe EOF)
    START_FAILED = 3  # on_start raised (START_FAILED was sent first)
    RESTART_FAILED = 4  # a fresh instance after a failed tell could not start
    STUCK = 70  # a handler ran past stuck_after; the watchdog ended the process
    READER_FAILED = 75  # the thread reading the pipe failed: the process no longer reads mail


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
    """Pickle an exception, or a RuntimeError carrying its text when it does not pickle.

    The traceback does not pickle: its text goes along as a note (``__notes__``), so
    the parent's log and the caller see where in the child it was raised.
    """
    if exc.__traceback__ is not None:
        lines = traceback.format_tb(exc.__traceback__)
        exc.add_note("Traceback in the actor's process (most recent call last):\n"
                     + "".join(lines).rstrip())
    try:
        data = pickle.dumps(exc, protocol=PROTOCOL)
        pickle.loads(data)
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"), protocol=PROTOCOL)
    return data


def load(data: bytes) -> Any:
    """Unpickle a frame or a payload."""
    return pickle.loads(data)
