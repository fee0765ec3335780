"""Chunks published into a balanced group, on their way to its actor.

A publisher used to tell the group actor every chunk it fanned out: one mailbox message,
and one wake-up of the group's thread, per ``topic.publish``: py-spy put 541 of the 1,245
samples of one-at-a-time publishes (into a group nobody read) on that tell. Now the chunk is
appended here, and the group is told `ARRIVED` only when it is not already due to take
what waits: a burst of publishes costs the group one mailbox message and one wake-up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from runtime.core._envelope import Envelope

if TYPE_CHECKING:
    from actors import Ref

__all__ = ["ARRIVED", "Arrivals", "Chunk", "KeyMark"]

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
    """A group's incoming chunks, in publish order; lock-free (the GIL orders the steps).

    Why no chunk is left behind: `take` clears the due flag *before* it empties the
    queue. A publisher appends its chunk first, then reads the flag. If it reads
    "due", the group's `take` that will clear the flag has not started yet, so that
    take sees the chunk. If it reads "not due", it sets the flag and tells the group,
    so another take follows. At worst a take finds nothing (harmless).

    Made before its group actor (which takes from it), then `bind`-ed to that actor
    before any publisher can see the group.
    """

    __slots__ = ("_chunks", "_due", "_tell")

    def __init__(self) -> None:
        self._chunks: deque[Chunk] = deque()
        self._due = False
        self._tell: Callable[[Any], None] = _unbound

    def bind(self, ref: Ref) -> None:
        """Tell ``ref`` (the group actor) when chunks arrive."""
        self._tell = ref.tell

    def put(self, chunk: Sequence[Envelope], keys: KeyMark = True) -> None:
        """Queue ``chunk`` for the group; tell it `ARRIVED` unless it is due already.

        ``keys``: what its messages' keys are (`KeyMark`; the chunk and its mark travel
        as one item, so no take can separate them)."""
        self._chunks.append((chunk, keys))
        if not self._due:
            self._due = True
            self._tell(ARRIVED)

    def take(self) -> list[Chunk]:
        """Every chunk waiting and its `KeyMark`, oldest first (the group's side)."""
        self._due = False
        chunks, popleft = self._chunks, self._chunks.popleft
        return [popleft() for _ in range(len(chunks))]
