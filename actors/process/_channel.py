"""The parent's end of one process incarnation: sequence numbers, pending replies, writes.

Each write sends one frame to the child without ever blocking past a bound. The parent's
end of a child's pipe is a Unix socket shared by the I/O thread (blocking reads) and the
senders (writes). A blocking write to a child that stopped reading would hang the
sending thread -- often an actor's -- for good. `send_frame` sends with
``MSG_DONTWAIT`` (the descriptor itself stays blocking for the reader) and waits for
room between sends; `FrameStalled` reports a child that took nothing for
``stall_timeout`` seconds. The frame format is `multiprocessing.connection`'s (a signed
32-bit big-endian length, or -1 and an unsigned 64-bit one), so the child reads it
with ``Connection.recv_bytes``.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import socket
import struct
import threading
import time
from collections import deque
from concurrent.futures import Future
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from actors.process import _wire as wire
from actors.process._wire import PROTOCOL

__all__ = ["DEFAULT_STALL_TIMEOUT", "Channel", "FrameStalled", "send_frame"]

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


logger = logging.getLogger(__name__)

# A tell this soon after the last send is part of a burst, left to the writer thread to
# batch: a longer window hands more tells to the writer (fewer, larger frames), a shorter
# one sends more of them from the caller's thread (less latency, more frames); re-measure
# with ``python -m benchmarks --only process_roundtrip process_batched``.
_BURST = 100e-6
# How long a send may make no progress before the child counts as stuck: its reader
# thread drains the pipe whatever its handler does, so a pipe that stays full means
# the process no longer reads (it is killed and, when supervised, replaced).
DEFAULT_STALL_TIMEOUT = 60.0


class Channel:
    """One live process: what was sent to it and is not answered yet.

    ``lock`` is the owning cell's lock. Writes are combined: the first sender to find
    the channel idle sends, and keeps sending whatever others queued meanwhile, so a
    busy channel batches on its own while an idle one adds no latency.
    """

    def __init__(self, process: BaseProcess, conn: Connection, lock: threading.Lock,
                 stall_timeout: float = DEFAULT_STALL_TIMEOUT) -> None:
        self.process = process
        self.stall_timeout = stall_timeout
        self.conn = conn
        self.lock = lock
        self.sentinel: int = process.sentinel
        self.seq = 0
        self.asks: dict[int, Future[Any]] = {}
        self.tells: deque[tuple[int, Any]] = deque()
        self.out: list[tuple[str, int, bytes | None]] = []
        self.flushing = False
        self.scheduled = False  # queued for the system's writer thread
        self.last_send = 0.0
        self.stopping = False
        self.reaped = False
        self.last_heard = time.monotonic()
        self.start_failed = False
        self.exited_normally = False
        self.broken = False
        # Asks a handler answered with ``SystemExit``: the child exits right after, so they
        # resolve once its exit is handled (mail their callers send next then waits for
        # the next incarnation instead of entering a pipe that is about to close).
        self.exit_replies: list[tuple[Future[Any], BaseException]] = []

    def enqueue(self, kind: str, message: Any, payload: bytes | None, reply: Future[Any] | None) -> None:
        """Queue one item for sending (``lock`` held by the caller)."""
        self.seq += 1
        seq = self.seq
        if reply is not None:
            self.asks[seq] = reply
        elif kind == wire.TELL:
            self.tells.append((seq, message))
        self.out.append((kind, seq, payload))

    def flush(self) -> None:
        """Send what is queued unless another thread is already sending it."""
        with self.lock:
            if self.flushing or not self.out:
                return
            self.flushing = True
        while True:
            with self.lock:
                items, self.out = self.out, []
                if not items or self.broken:
                    self.flushing = False
                    return
            try:
                send_frame(self.conn, pickle.dumps(items, protocol=PROTOCOL), self.stall_timeout)
                self.last_send = time.monotonic()
            except (OSError, ValueError) as exc:
                with self.lock:  # the process is dying: the reaper settles what was sent
                    self.broken = True
                    self.flushing = False
                if isinstance(exc, FrameStalled):
                    logger.error("process %s stopped reading its pipe (%s); killing it",
                                 self.process.name, exc)
                    self.process.kill()
                return

    def bursting(self) -> bool:
        """True while mail arrives faster than sends complete: leave it to the writer."""
        return self.flushing or time.monotonic() - self.last_send < _BURST

    def acked(self, seq: int) -> None:
        """Tells up to ``seq`` were handled (``lock`` held)."""
        tells = self.tells
        while tells and tells[0][0] <= seq:
            tells.popleft()

    def end(self, grace: float = 1.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds, the process if it still runs."""
        process = self.process
        if process.is_alive():
            process.terminate()
            process.join(grace)
        if process.is_alive():
            process.kill()
            process.join(grace)

    def kill_group(self) -> None:
        """SIGKILL what is left of the process's group: whatever its handlers started.

        The child made itself a group leader (pgid = its pid) before running user code.
        Called once the process itself has ended, or is being ended for good.
        """
        pid = self.process.pid
        if pid is None or not hasattr(os, "killpg"):
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # nothing left in the group

    def in_flight(self) -> int:
        return len(self.asks) + len(self.tells)
