"""Supervision specs: what to start and how to restart it."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Backoff", "ChildSpec", "RestartKind", "Strategy", "SupervisorSpec"]

RestartKind = Literal["permanent", "transient", "temporary"]
Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]

_RESTART_KINDS = ("permanent", "transient", "temporary")
_STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delay before the n-th consecutive restart: ``min(max, min * 2**(n-1))`` ± ``jitter``."""

    min: float = 0.1
    max: float = 5.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not 0 <= self.min <= self.max:
            raise ValueError(f"Backoff needs 0 <= min <= max, got min={self.min} max={self.max}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"Backoff jitter must be in [0, 1), got {self.jitter}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based)."""
        base = min(self.max, self.min * 2.0 ** (attempt - 1))
        spread = float((rng or random).uniform(-self.jitter, self.jitter))
        return max(0.0, base * (1 + spread))


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """One child of a supervisor.

    ``factory`` builds the actor (an `Actor` subclass or a callable returning one),
    or is a `SupervisorSpec` for a nested supervisor. ``stuck_after`` (process actors
    only): a handler running longer than this many seconds, or a process that stops
    sending heartbeats for that long, counts as a crash and the process is replaced.
    """

    id: str
    factory: Any
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    restart: RestartKind = "permanent"
    shutdown: float = 5.0
    process: bool = False
    stuck_after: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("ChildSpec id must be a non-empty string")
        if self.restart not in _RESTART_KINDS:
            raise ValueError(f"ChildSpec restart must be one of {_RESTART_KINDS}, got {self.restart!r}")
        if self.shutdown < 0:
            raise ValueError("ChildSpec shutdown must be >= 0")
        if self.stuck_after is not None and not (self.process and self.stuck_after > 0):
            raise ValueError("ChildSpec stuck_after needs process=True and a value > 0")
        if not callable(self.factory) and not isinstance(self.factory, SupervisorSpec):
            raise ValueError(f"ChildSpec factory must be callable or a SupervisorSpec: {self.factory!r}")


@dataclass(frozen=True, slots=True)
class SupervisorSpec:
    """A supervisor: its children (started in order) and its restart policy."""

    children: Sequence[ChildSpec]
    strategy: Strategy = "one_for_one"
    max_restarts: int = 3
    within: float = 5.0
    backoff: Backoff | None = None

    def __post_init__(self) -> None:
        if self.strategy not in _STRATEGIES:
            raise ValueError(f"SupervisorSpec strategy must be one of {_STRATEGIES}, got {self.strategy!r}")
        if self.max_restarts < 0 or self.within <= 0:
            raise ValueError("SupervisorSpec needs max_restarts >= 0 and within > 0")
        ids = [child.id for child in self.children]
        if len(ids) != len(set(ids)):
            raise ValueError(f"SupervisorSpec child ids must be unique: {ids}")
