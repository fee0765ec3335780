"""The hand-written baseline for process actors: one process, one ``multiprocessing.Pipe``.

The child functions are module level so that forkserver and spawn can import them.
Frames are pickled (protocol 5) per send, as a user writing this by hand would.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["counting_child", "echo_child", "handle", "raw_process", "send_batched"]

PROTOCOL = 5
_JOIN_TIMEOUT = 10.0
_SYNC = "sync"


def handle(message: Any, count: int) -> int:
    """The per-message work of the baseline children (the actors' handler does the same)."""
    return count + 1


def echo_child(conn: Connection) -> None:
    """Answer every frame with its unpickled-and-repickled content; ``None`` ends."""
    count = 0
    while True:
        message = pickle.loads(conn.recv_bytes())
        if message is None:
            return
        count = handle(message, count)
        conn.send_bytes(pickle.dumps(count, protocol=PROTOCOL))


def counting_child(conn: Connection) -> None:
    """Handle every message of every list frame; answer ``"sync"`` with the count; ``None`` ends."""
    count = 0
    while True:
        frame = pickle.loads(conn.recv_bytes())
        if frame is None:
            return
        if frame == _SYNC:
            conn.send_bytes(pickle.dumps(count, protocol=PROTOCOL))
            continue
        for message in frame:
            count = handle(message, count)


def send_batched(conn: Connection, count: int, batch: int) -> int:
    """Send ``count`` messages as pickled lists of ``batch``, then sync; returns the child's count."""
    send = conn.send_bytes
    for start in range(0, count, batch):
        send(pickle.dumps(list(range(start, min(count, start + batch))), protocol=PROTOCOL))
    send(pickle.dumps(_SYNC, protocol=PROTOCOL))
    return int(pickle.loads(conn.recv_bytes()))


@contextmanager
def raw_process(target: Callable[[Connection], None], start_method: str) -> Iterator[Connection]:
    """Start ``target(conn)`` in a child process; on exit, end it and join it.

    Blocks at exit up to 10 s for a clean end, then kills the child.
    """
    context = multiprocessing.get_context(start_method)
    parent, child = context.Pipe(duplex=True)
    process = context.Process(  # type: ignore[attr-defined]
        target=target, args=(child,), name="bench-raw-pipe", daemon=True)
    process.start()
    child.close()
    try:
        yield parent
    finally:
        try:
            parent.send_bytes(pickle.dumps(None, protocol=PROTOCOL))
        except OSError:
            pass
        process.join(_JOIN_TIMEOUT)
        if process.is_alive():
            process.kill()
            process.join(_JOIN_TIMEOUT)
        parent.close()
