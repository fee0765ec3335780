"""Mail that could not be delivered: a bounded, observable record."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DeadLetter", "DeadLetters"]

logger = logging.getLogger(__name__)

DeadLetterReason = Literal["stopped", "crashed", "restarting"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A message that never reached (or never was handled by) its actor.

    Attributes:
        message: the message itself.
        recipient: the name of the actor it was sent to.
        reason: ``"stopped"`` (the actor was stopped), ``"crashed"`` (its handler
            or its process died on it), ``"restarting"`` (it was cut off by a restart).
        at: ``time.time()`` when it was recorded.
    """

    message: Any
    recipient: str
    reason: DeadLetterReason
    at: float


class DeadLetters:
    """The system's dead letters: ``len()``, iteration (oldest first), ``drain()``, ``subscribe()``.

    Bounded: past ``limit`` entries the oldest are evicted (``evicted`` counts them).
    """

    def __init__(self, limit: int = 100_000) -> None:
        self._items: deque[DeadLetter] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[DeadLetter], Any]] = []
        self.evicted = 0

    def add(self, letter: DeadLetter) -> None:
        """Record a dead letter and tell every subscriber (on the caller's thread)."""
        with self._lock:
            if len(self._items) == self._items.maxlen:
                self.evicted += 1
            self._items.append(letter)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(letter)
            except Exception:
                logger.exception("dead-letter subscriber failed")

    def subscribe(self, callback: Callable[[DeadLetter], Any]) -> Callable[[], None]:
        """Call ``callback(letter)`` for each new dead letter; returns an unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def drain(self) -> list[DeadLetter]:
        """Remove and return every dead letter, oldest first."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[DeadLetter]:
        with self._lock:
            return iter(list(self._items))
