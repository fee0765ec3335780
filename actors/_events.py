"""Lifecycle events of a system's actors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Event", "Events"]

logger = logging.getLogger(__name__)

EventKind = Literal["started", "failed", "restarted", "stopped", "escalated"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something that happened to an actor.

    Attributes:
        kind: ``"started"``, ``"failed"``, ``"restarted"``, ``"stopped"`` or ``"escalated"``.
        name: the actor's (or supervisor's) name.
        error: the exception involved, or None where nothing failed.
        at: ``time.time()`` when it happened.
    """

    kind: EventKind
    name: str
    error: BaseException | None
    at: float


class Events:
    """Subscribers to lifecycle events; callbacks run on the thread that emits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: tuple[Callable[[Event], Any], ...] = ()

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event from now on; returns an unsubscribe function."""
        with self._lock:
            self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not callback)

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber; a failing subscriber is logged, not raised."""
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception:
                logger.exception("event subscriber failed on %s", event)
