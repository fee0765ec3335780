"""The future of a `Publisher.publish_many` call: every message's id, in order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError

from runtime.core._future import MessageFuture

__all__ = ["Bulk"]


class Bulk:
    """Gathers the ids of a ``publish_many`` call's ``count`` messages into one future.

    The Publisher settles each message exactly once, in slices (the part of the call one
    batch holds). The future resolves with every id, in publish order, once the last
    one is confirmed; it fails with the first failure (later slices are still counted
    down, so the call leaves nothing waiting).

    Args:
        count: how many messages the call published (0 resolves at once with ``[]``).
    """

    __slots__ = ("_ids", "_lock", "_remaining", "future")

    def __init__(self, count: int) -> None:
        self.future: Future[list[str]] = MessageFuture()
        self._ids: list[str] = [""] * count
        self._remaining = count
        # Slices settle in the actor's thread, but a stopping Publisher or a refused
        # admission fails some from a publishing thread: the count is kept under a lock.
        self._lock = threading.Lock()
        if count == 0:
            self.future.set_result([])

    def resolve(self, first: int, ids: Sequence[str]) -> None:
        """Messages ``first`` to ``first + len(ids) - 1`` are confirmed with ``ids``."""
        with self._lock:
            self._ids[first:first + len(ids)] = ids
            self._remaining -= len(ids)
            last = self._remaining == 0
        if last:
            self._set(lambda: self.future.set_result(self._ids))

    def fail(self, count: int, error: BaseException) -> None:
        """``count`` messages of the call failed with ``error``."""
        with self._lock:
            self._remaining -= count
        self._set(lambda: self.future.set_exception(error))

    @staticmethod
    def _set(settle: Callable[[], None]) -> None:
        try:
            settle()
        except InvalidStateError:  # failed before, or cancelled by its holder
            pass
