"""Chunks published into a balanced group, on their way to its actor.

Telling the group actor every chunk would cost one mailbox message, and one wake-up of
the group's thread, per ``topic.publish``. The chunk is appended here instead, and the
group is told `ARRIVED` only when it is not already due to take what waits: a burst of
publishes costs the group one mailbox message and one wake-up.
"""

from __future__ import annotations

import threading
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
