"""What cells and supervisors need from their system (kept apart to avoid import cycles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from actors._cell import Cell
    from actors._dead_letters import DeadLetters
    from actors._events import Events
    from actors._scheduler import Scheduler

__all__ = ["SystemContext"]


class SystemContext(Protocol):
    """The parts of an `ActorSystem` that its cells use."""

    name: str
    dead_letters: DeadLetters
    events: Events
    scheduler: Scheduler

    def register(self, cell: Cell) -> None: ...

    def unregister(self, cell: Cell) -> None: ...

    def process_host(self) -> Any: ...

    def adopt_process(self, cell: Any, channel: Any) -> None: ...

    def schedule_write(self, channel: Any) -> None: ...
