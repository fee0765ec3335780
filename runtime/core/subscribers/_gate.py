"""Room in one balanced group's bounded queue: publishers take it, the group gives it back."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Protocol

from runtime.errors import WouldBlock

if TYPE_CHECKING:
    from actors import Ref
    from runtime.core.subscribers._arrivals import Arrivals

__all__ = ["SELF_WAIT", "Gate", "GroupHandle"]

# Longest a group's own member waits for room in it (its handler publishing into its own
# group): the room it waits for may be its own to give back, so an unbounded wait could
# last for ever.
SELF_WAIT = 2.0


class _Seat(Protocol):
    thread: int


class Gate:
    """Counts messages accepted for a group and not yet handed to a member.

    Publishers take room before they enqueue (waiting with ``block``, or taking what is
    free with ``drop_newest``); the group actor releases it as it dispatches. Closing
    the gate (topic closed or group deleted) wakes every waiter. Thread-safe.

    With ``block`` a chunk (a Publisher batch, at most ``capacity`` messages) goes in
    whole as soon as the queue is not full, so the queue may pass its capacity by less
    than one chunk (as Pub/Sub's flow control may by a batch). Waiting for room for the
    whole chunk instead made every default Publisher batch (100) wait on the default
    capacity (128) until the group had handed on the one before: a block and a wake-up
    of the publishing thread per batch. A single message waits exactly as before.

    A member's handler that publishes into its own full group waits at most
    `SELF_WAIT`, then gets `WouldBlock` saying so: the room it waits for may only come
    back once that very handler returns.

    Args:
        capacity: the group's ``balanced_capacity``.
        name: the group's name (for errors).
    """

    def __init__(self, capacity: int, *, name: str = "") -> None:
        self.capacity = capacity
        self.name = name
        self.members: set[_Seat] = set()  # thread members (their thread ids, once running)
        self.used = 0
        self.closed = False
        self._waiting = 0
        self._changed = threading.Condition(threading.Lock())

    def acquire(self, count: int, deadline: float | None) -> bool:
        """Wait until the queue is not full, then take room for ``count`` messages.

        ``count`` must not exceed the capacity. Blocks until ``deadline``
        (``time.monotonic()`` based; None: unbounded).

        Returns:
            True once taken; False when the gate is closed.

        Raises:
            WouldBlock: the deadline passed first.
        """
        with self._changed:
            if not self.closed and self.used >= self.capacity:
                deadline = self._bound(deadline)
            while not self.closed and self.used >= self.capacity:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WouldBlock(self._full())
                self._waiting += 1
                try:
                    self._changed.wait(remaining)
                finally:
                    self._waiting -= 1
            if self.closed:
                return False
            self.used += count
            return True

    def _bound(self, deadline: float | None) -> float | None:
        ident = threading.get_ident()
        if not any(seat.thread == ident for seat in self.members):
            return deadline
        own = time.monotonic() + SELF_WAIT
        return own if deadline is None else min(deadline, own)

    def _full(self) -> str:
        text = f"balanced group {self.name!r} is full ({self.capacity} messages)"
        ident = threading.get_ident()
        if any(seat.thread == ident for seat in self.members):
            text += (f"; a handler of group {self.name!r} publishing into it waited"
                     f" {SELF_WAIT}s for room only its own progress can free")
        return text

    def try_acquire(self, count: int) -> int:
        """Take room for up to ``count`` messages without waiting; -1 when closed."""
        with self._changed:
            if self.closed:
                return -1
            taken = max(0, min(count, self.capacity - self.used))
            self.used += taken
            return taken

    def force(self, count: int) -> None:
        """Take room even past the capacity (redeliveries must never wait)."""
        with self._changed:
            self.used += count

    def release(self, count: int) -> None:
        """Give room back; wakes waiting publishers once the queue is not full (before,
        none of them could go in: a thread member's credit of 32 used to wake the topic
        thread for nothing, 72 -> 10 wakes per 1,000 messages in ``pipeline_inproc``)."""
        with self._changed:
            self.used -= count
            if self._waiting and self.used < self.capacity:
                self._changed.notify_all()

    def close(self) -> None:
        """Refuse room from now on and wake every waiter."""
        with self._changed:
            self.closed = True
            self._changed.notify_all()


class GroupHandle:
    """What publishers need of a balanced group: its name, actor, room and arrivals."""

    __slots__ = ("arrivals", "gate", "name", "ref")

    def __init__(self, name: str, ref: Ref, gate: Gate, arrivals: Arrivals) -> None:
        self.name = name
        self.ref = ref
        self.gate = gate
        self.arrivals = arrivals
