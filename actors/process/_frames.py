"""Sending one frame to a child process without ever blocking past a bound.

The parent's end of a child's pipe is a Unix socket shared by the I/O thread (blocking
reads) and the senders (writes). A blocking write to a child that stopped reading would
hang the sending thread -- often an actor's -- for good. `send_frame` sends with
``MSG_DONTWAIT`` (the descriptor itself stays blocking for the reader) and waits for
room between sends; `FrameStalled` reports a child that took nothing for
``stall_timeout`` seconds. The frame format is `multiprocessing.connection`'s (a signed
32-bit big-endian length, or -1 and an unsigned 64-bit one), so the child reads it
with ``Connection.recv_bytes``.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from multiprocessing.connection import Connection

__all__ = ["FrameStalled", "send_frame"]

_SHORT_LIMIT = 0x7FFFFFFF


class FrameStalled(OSError):
    """The child took none of a frame's bytes within the stall timeout."""


def send_frame(conn: Connection, data: bytes, stall_timeout: float) -> None:
    """Send ``data`` as one frame on ``conn``; blocks only while the child takes data.

    One sender at a time per connection (the caller ensures it). The header and the data
    leave in one ``sendmsg`` (no copy of the data to put the header in front of it, and
    one system call where a large frame took two).

    Raises:
        FrameStalled: no byte went out for ``stall_timeout`` seconds.
        OSError: the child is gone (broken pipe, reset) or ``conn`` is closed.
    """
    size = len(data)
    header = struct.pack("!i", size) if size <= _SHORT_LIMIT else struct.pack("!iQ", -1, size)
    views = [memoryview(header), memoryview(data)]
    sock = socket.socket(fileno=conn.fileno())  # borrows the descriptor: detached below
    try:
        while views:  # a partial send drops what went out
            try:
                sent = sock.sendmsg(views, (), socket.MSG_DONTWAIT)
            except BlockingIOError:
                _wait_for_room(sock, stall_timeout)
                continue
            while views and sent >= len(views[0]):
                sent -= len(views.pop(0))
            if sent:
                views[0] = views[0][sent:]
    finally:
        sock.detach()


def _wait_for_room(sock: socket.socket, stall_timeout: float) -> None:
    deadline = time.monotonic() + stall_timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FrameStalled(f"the child took no data for {stall_timeout:g} s")
        _, writable, _ = select.select([], [sock], [], remaining)
        if writable:
            return
