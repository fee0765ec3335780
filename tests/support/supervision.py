"""Actors and an event log shared by the supervision tests."""

from __future__ import annotations

import threading
from typing import Any

from actors import Actor, ActorSystem, Event

__all__ = ["EventLog", "Worker"]


class Worker(Actor):
    """Counts the instances built per id; ``"fail"`` raises, ``"exit"`` stops itself."""

    def __init__(self, births: dict[str, int], ident: str) -> None:
        super().__init__()
        births[ident] = births.get(ident, 0) + 1
        self.births = births

    def on_receive(self, message: Any) -> Any:
        if message == "fail":
            raise RuntimeError("worker failure")
        if message == "exit":
            self.stop()
            return None
        return "ok"


class EventLog:
    """Collects events; waits until a predicate over them holds."""

    def __init__(self, system: ActorSystem) -> None:
        self.events: list[Event] = []
        self.cond = threading.Condition()
        system.events.subscribe(self._add)

    def _add(self, event: Event) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait_for(self, kind: str, name: str, count: int = 1, timeout: float = 5.0) -> list[Event]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.of(kind, name)) >= count, timeout), (
                f"no {count} {kind} events for {name}: {self.events}")
            return self.of(kind, name)

    def of(self, kind: str, name: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (name is None or e.name == name)]


def event_list(system: ActorSystem) -> tuple[list[Event], threading.Condition]:
    """Every event from now on, and the condition notified on each (for ``wait_for``)."""
    log = EventLog(system)
    return log.events, log.cond
