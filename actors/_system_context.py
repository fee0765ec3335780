"""What cells and supervisors need from their system (kept apart to avoid import cycles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from actors._cell import Cell
    from actors._dead_letters import DeadLetters
    from actors._events import Events
    from actors._ref import Ref
    from actors._scheduler import Scheduler
    from actors._spec import ChildSpec
    from actors.process._cell import ProcessCell
    from actors.process._channel import Channel

__all__ = ["SystemContext"]


class SystemContext(Protocol):
    """The parts of a system's kernel (`actors._kernel.Kernel`) that its cells use."""

    name: str
    dead_letters: DeadLetters
    events: Events
    scheduler: Scheduler

    def make_cell(self, spec: ChildSpec, parent: Ref | None) -> Cell: ...

    def register(self, cell: Cell) -> None: ...

    def unregister(self, cell: Cell) -> None: ...

    def process_host(self) -> Any: ...  # a multiprocessing context (typeshed's BaseContext lacks Process)

    def adopt_process(self, cell: ProcessCell, channel: Channel) -> None: ...

    def schedule_write(self, channel: Channel) -> None: ...
