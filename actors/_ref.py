"""Ref: the stable handle to an actor."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import pykka

if TYPE_CHECKING:
    from actors._cell import Cell

__all__ = ["Ref"]


class Ref:
    """The stable handle to an actor, valid across its restarts.

    Refs are cheap and thread-safe. A process actor's Ref pickles messages at the
    sender, so an unpicklable message fails at once with `MessageNotSerializableError`.
    """

    __slots__ = ("_cell",)

    def __init__(self, cell: Cell) -> None:
        self._cell = cell

    @property
    def name(self) -> str:
        """The actor's unique name in its system."""
        return self._cell.name

    def tell(self, message: Any) -> None:
        """Send ``message`` without waiting. Never blocks.

        To a stopped actor the message goes to the dead letters (no raise).

        Raises:
            MessageNotSerializableError: a process actor's message does not pickle.
        """
        self._cell.tell(message)

    def ask(self, message: Any, *, timeout: float | None = 5.0) -> Future[Any]:
        """Send ``message`` and return a future for the reply. Does not block.

        The future fails with `AskTimeoutError` after ``timeout`` seconds (None: never),
        with `ActorDeadError` if the actor is stopped, with `WorkerCrashedError` if its
        process dies first, or with the exception the handler raised.

        Raises:
            MessageNotSerializableError: a process actor's message does not pickle.
        """
        return self._cell.ask(message, timeout)

    def stop(self, *, timeout: float | None = 5.0) -> None:
        """Stop the actor for good; mail queued before the stop is handled first.

        A supervised actor is removed from its supervisor, not restarted. Blocks up
        to ``timeout`` seconds, then drops what is left into the dead letters.
        """
        self._cell.stop(timeout)

    def proxy(self) -> pykka.ActorProxy[Any]:
        """pykka's `ActorProxy` for this actor: attribute reads and method calls return
        pykka futures (``.get(timeout=None)``), ``.defer()`` calls with tell semantics.

        Thread actors, and process actors whose factory is an importable `Actor` class.
        A proxy made before a restart keeps working: it sends to the live mailbox.

        Raises:
            ActorDeadError: the actor is stopped.
            TypeError: a process actor built by something other than an `Actor` class.
        """
        return self._cell.proxy()

    def is_alive(self) -> bool:
        """True until the actor is stopped for good (also while it restarts)."""
        return not self._cell.dead

    def __repr__(self) -> str:
        return f"<Ref {self._cell.name!r} ({self._cell.kind})>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other._cell is self._cell

    def __hash__(self) -> int:
        return id(self._cell)

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a Ref ({self._cell.name!r}) cannot cross a process boundary; "
            "send data, or look the actor up by name on the other side"
        )
