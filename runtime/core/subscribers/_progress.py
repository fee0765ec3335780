"""Where each worker process of a group says what it is running: shared, file-backed slots.

A worker writes, into its member's slot, the number of the hand-over it starts, when it
started it and the index of the delivery its handler is on; the parent reads the slot
when a hand-over's ack deadline comes due (a hand-over the worker has not started yet
keeps its deadline off) and when the worker dies (only the delivery it was running
counts an attempt). A killed process cannot report anything, so the slot is memory both
processes map: the worker's writes survive it. On Linux that memory is an anonymous
file (``memfd``) the worker opens through ``/proc/<parent>/fd``: it has no name on disk,
so a parent that dies without `Progress.close` (SIGKILL) leaves nothing behind.

Each slot is three 64-bit words: the hand-over's number, the delivery's index and the
start time (``time.monotonic_ns``, one clock for every process of a machine). The worker
writes the start time and the index before the number, and the parent reads the number
first, so a read that races with the next start sees that later start: the deadline it
derives is later, never earlier, than the worker's own.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
import time

__all__ = ["NOT_STARTED", "Progress", "SlotWriter"]

_WORDS = 3  # number, index, started (ns)
_WORD = 8
# The index a worker writes once its hand-over's handler calls are over.
_DONE = -1

NOT_STARTED = float("-inf")
_PAST = 2**62  # a hand-over number no worker reaches


class Progress:
    """The slots of one group's worker processes (one per member), owned by the parent.

    The backing file is anonymous on Linux (gone with the last process that maps it);
    elsewhere it lives in the temporary directory until `close` removes it.

    Args:
        slots: how many members.
    """

    def __init__(self, slots: int) -> None:
        fd, self.path, self._named = _shared_file()
        try:
            os.ftruncate(fd, max(slots, 1) * _WORDS * _WORD)
            self._map = mmap.mmap(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        # An anonymous file stays reachable by its /proc path only while this fd is open.
        self._fd: int | None = fd
        if self._named:
            os.close(fd)
            self._fd = None
        self._words = memoryview(self._map).cast("q")
        self._lock = threading.Lock()  # reads against `close`

    def read(self, slot: int) -> tuple[int, int, float]:
        """``(number, index, started)`` of ``slot``: the last hand-over its worker started,
        the delivery its handler is on (-1: done with it) and when it started (seconds,
        ``time.monotonic`` scale); once closed, a worker past every hand-over."""
        base = slot * _WORDS
        with self._lock:  # against `close`
            if self._map.closed:
                return _PAST, _DONE, 0.0
            words = self._words
            number = words[base]
            return number, words[base + 1], words[base + 2] / 1e9

    def running_for(self, slot: int, number: int) -> float:
        """Seconds since ``slot``'s worker started hand-over ``number``; `NOT_STARTED`
        when it has not (an earlier one runs); ``inf`` when it is past it."""
        started, _, at = self.read(slot)
        if started < number:
            return NOT_STARTED
        if started > number:
            return float("inf")
        return max(time.monotonic() - at, 0.0)

    def running_index(self, slot: int, number: int) -> int | None:
        """The index of the delivery of hand-over ``number`` that ``slot``'s worker was
        running; None when it was not running one of them."""
        started, index, _ = self.read(slot)
        return index if started == number and index != _DONE else None

    def close(self) -> None:
        """Unmap the slots and remove the file (idempotent)."""
        with self._lock:
            if self._map.closed:
                return
            self._words.release()
            self._map.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._named:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _shared_file() -> tuple[int, str, bool]:
    """An open file for the slots, the path a worker opens it by, and whether that path is
    a name on disk (to remove on close) rather than an anonymous file's ``/proc`` entry."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = memfd_create("actorbus-progress")
        return fd, f"/proc/{os.getpid()}/fd/{fd}", False
    fd, path = tempfile.mkstemp(prefix="actorbus-progress-")
    return fd, path, True


class SlotWriter:
    """The worker's side of one slot (opened from the path the parent sends).

    Args:
        path: the `Progress` file.
        slot: the member's slot.
    """

    def __init__(self, path: str, slot: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        self.words = memoryview(self._map).cast("q")
        self.index_at = slot * _WORDS + 1  # where the running delivery's index goes
        self._base = slot * _WORDS

    def start(self, number: int) -> None:
        """Hand-over ``number`` starts now, on its first delivery."""
        words, base = self.words, self._base
        words[base + 2] = time.monotonic_ns()
        words[base + 1] = 0
        words[base] = number

    def done(self) -> None:
        """The handler calls of the running hand-over are over."""
        self.words[self.index_at] = _DONE
