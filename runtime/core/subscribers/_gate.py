"""What publishers see of one balanced group: its room and its arrivals.

Room in the group's bounded queue (`Gate`): publishers take it, the group gives it back.
Chunks published into the group wait in its `Arrivals` on their way to its actor.
Telling the group actor every chunk would cost one mailbox message, and one wake-up of
the group's thread, per ``topic.publish``. The chunk is appended there instead, and the
group is told `ARRIVED` only when it is not already due to take what waits: a burst of
publishes costs the group one mailbox message and one wake-up.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Protocol

from runtime.errors import WouldBlock

if TYPE_CHECKING:
    from actors import Ref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from runtime.core._envelope import Envelope

if TYPE_CHECKING:
    from actors import Ref

__all__ = ["ARRIVED", "SELF_WAIT", "Arrivals", "Chunk", "Gate", "GroupHandle", "KeyMark"]

# What the topic knows of a chunk's keys (from its own room check): False, none (the group
# queues it as it is, reading no key); a str, the one key all of its messages share (the
# group routes it whole); True, several (the group sorts it by key).
KeyMark = bool | str
Chunk = tuple[Sequence[Envelope], KeyMark]


class _Arrived:
    """The group's cue to take what waits in its `Arrivals`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ARRIVED"


ARRIVED: Final = _Arrived()


def _unbound(message: Any) -> None:
    raise RuntimeError("Arrivals used before bind(): its group actor is unknown")


class Arrivals:
    """A group's incoming chunks, in publish order. Thread-safe.

    Why no chunk is left behind: under one lock, `put` appends its chunk and reads the
    due flag, and `take` clears the flag and empties the queue. A put that finds the
    flag set comes before that take, which then sees its chunk; one that finds it clear
    sets it and tells the group, so another take follows. At worst a take finds nothing
    (harmless).

    Made before its group actor (which takes from it), then `bind`-ed to that actor
    before any publisher can see the group.
    """

    __slots__ = ("_chunks", "_due", "_lock", "_tell")

    def __init__(self) -> None:
        self._chunks: list[Chunk] = []
        self._due = False
        self._lock = threading.Lock()
        self._tell: Callable[[Any], None] = _unbound

    def bind(self, ref: Ref) -> None:
        """Tell ``ref`` (the group actor) when chunks arrive."""
        self._tell = ref.tell

    def put(self, chunk: Sequence[Envelope], keys: KeyMark = True) -> None:
        """Queue ``chunk`` for the group; tell it `ARRIVED` unless it is due already.

        ``keys``: what its messages' keys are (`KeyMark`; the chunk and its mark travel
        as one item, so no take can separate them)."""
        with self._lock:
            self._chunks.append((chunk, keys))
            if self._due:
                return
            self._due = True
        self._tell(ARRIVED)

    def take(self) -> list[Chunk]:
        """Every chunk waiting and its `KeyMark`, oldest first (the group's side)."""
        with self._lock:
            self._due = False
            chunks, self._chunks = self._chunks, []
        return chunks


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

    The capacity bounds what waits for a member with no room. Room the members have
    free is lent on top of it (`lend`, by the group after each dispatch): unkeyed
    messages may fill all of it, since any member takes them; a keyed chunk only what
    the emptiest single member could take, since its messages may all go to that one
    (for a worker process running two hand-overs: its next one, see the group's
    `_keyed_room`).
    A topic sizes its chunks to that room while nobody reads its broadcast ring (`free`,
    `PublishPath.room`): a Publisher's run then enters as one chunk. Two threads that
    size chunks from the same free room at once may both go in, as two chunks of 128
    may: what passes the limit is still less than one chunk per publishing thread.
    Unkeyed messages the gate admits past the capacity are therefore handed on as soon
    as the group runs, and a stuck group (no room free) lends nothing but a stuck
    worker's next hand-over, to keyed messages: what a publisher can run ahead of it
    stays the capacity plus the members' prefetch (plus that one hand-over). Without
    lending, the topic thread waited for the group thread at every chunk while the
    workers sat idle, and hand-overs held at most two default batches.

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
        self.lent = 0  # room the members have free, for unkeyed messages (the group sets it)
        self.lent_keyed = 0  # the least one member has free, for keyed ones
        self.closed = False
        self._waiting = 0
        # Taken as the plain lock (a C context manager; the condition's ``with`` is two
        # Python calls per publish), waited on and notified through the condition.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def acquire(self, count: int, deadline: float | None, keyed: bool = True) -> bool:
        """Wait until the queue is not full, then take room for ``count`` messages.

        ``keyed``: whether any of them has a key (the stricter lent room applies).
        ``count`` must not exceed the capacity. Blocks until ``deadline``
        (``time.monotonic()`` based; None: unbounded).

        Returns:
            True once taken; False when the gate is closed.

        Raises:
            WouldBlock: the deadline passed first.
        """
        with self._lock:
            bounded = False
            while not self.closed and self.used >= self.capacity + (
                    self.lent_keyed if keyed else self.lent):
                if not bounded:
                    deadline, bounded = self._bound(deadline), True
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

    def try_acquire(self, count: int, keyed: bool = True) -> int:
        """Take room for up to ``count`` messages without waiting; -1 when closed."""
        with self._lock:
            if self.closed:
                return -1
            room = self.capacity + (self.lent_keyed if keyed else self.lent) - self.used
            taken = max(0, min(count, room))
            self.used += taken
            return taken

    def force(self, count: int) -> None:
        """Take room even past the capacity (redeliveries must never wait)."""
        with self._lock:
            self.used += count

    def release(self, count: int) -> None:
        """Give room back; wakes waiting publishers once the queue is not full (before,
        none of them could go in: a thread member's credit used to wake the topic
        thread for nothing)."""
        with self._lock:
            self.used -= count
            if self._waiting and self.used < self.capacity + self.lent:
                self._changed.notify_all()

    def hand_on(self, count: int) -> None:
        """``count`` messages left the queue for a member: their room comes back, and
        the member room lent for them is used up with it, in one step. Released alone,
        the room let publishers in against lent room the hand-over had just taken,
        until the group lent again: past a stuck member, more than capacity plus
        prefetch."""
        with self._lock:
            self.used -= count
            self.lent = max(self.lent - count, 0)
            self.lent_keyed = max(self.lent_keyed - count, 0)
            if self._waiting and self.used < self.capacity + self.lent:
                self._changed.notify_all()

    def free(self, keyed: bool) -> int:
        """Room a publish could take now without waiting (read without the lock: an
        estimate, for sizing a chunk; `acquire` decides)."""
        return max(0, self.capacity + (self.lent_keyed if keyed else self.lent) - self.used)

    def full(self) -> bool:
        """True while a publish would wait: of keyed messages, or of unkeyed ones (a
        stuck worker process lends its next hand-over to keyed messages alone)."""
        return self.used >= self.capacity + min(self.lent, self.lent_keyed)

    def lend(self, room: int, least: int) -> None:
        """The members' free room now (``least``: the smallest one member has); more of
        it wakes waiting publishers."""
        with self._lock:
            grew = room > self.lent or least > self.lent_keyed
            self.lent, self.lent_keyed = room, least
            if grew and self._waiting:
                self._changed.notify_all()

    def close(self) -> None:
        """Refuse room from now on and wake every waiter."""
        with self._lock:
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
