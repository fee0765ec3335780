"""The tracker actor: applies settlements, deadline expiries and the close sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actors import Actor
from runtime.core.settlement._delivery import Delivery, Tranche
from runtime.core.settlement._ledger import Ledger

__all__ = ["SWEEP", "TICK", "TrackerActor"]


@dataclass(frozen=True, slots=True)
class _Tick:
    """The timer says a deadline may have passed."""


@dataclass(frozen=True, slots=True)
class _Sweep:
    """The topic closed: force-nack everything handed over (ask)."""


TICK = _Tick()
SWEEP = _Sweep()


class TrackerActor(Actor):
    """Aggregates one topic's settlements into outcomes, stats and dead letters.

    Mail: a settled `Delivery`, a list of them (one handler batch), a `Tranche` acked
    whole, `TICK`, `SWEEP`.

    Args:
        ledger: the topic's books.
    """

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self._ledger = ledger

    def on_receive(self, message: Any) -> Any:
        """Apply one mailbox message to the ledger."""
        if type(message) is list:
            self._ledger.settle(message)
        elif type(message) is Tranche:
            self._ledger.settle_whole(message)
        elif isinstance(message, Delivery):
            self._ledger.settle((message,))
        elif isinstance(message, _Tick):
            self._ledger.expire()
        elif isinstance(message, _Sweep):
            self._ledger.sweep("closed")
        return None
