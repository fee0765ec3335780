"""What holds a topic's publishers: the bound a publish would wait on right now."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.core._settings import TopicSettings
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._gate import GroupHandle
from runtime.core.subscribers._ring import Ring

__all__ = ["holder"]


def holder(
    topic: str, settings: TopicSettings, ledger: Ledger, groups: Sequence[GroupHandle], ring: Ring,
) -> str | None:
    """Name what a publish to ``topic`` would wait for now, or None (a snapshot).

    In the order a publish meets them: ``max_pending``, a full balanced group (its queue
    at ``balanced_capacity`` plus the room its members lend to keyed messages: no member
    takes, or they are too slow), then a broadcast subscriber a whole ring behind (with
    ``broadcast_on_lag="block"``).
    """
    max_pending = settings.max_pending
    if max_pending is not None and ledger.pending >= max_pending:
        return f"topic {topic!r} has {ledger.pending} pending messages (max_pending {max_pending})"
    for group in groups:
        gate = group.gate
        # Either limit: an unkeyed publish waits at the room all members lend, a keyed
        # one at the least one member lends; neither is assumed the stricter.
        if not gate.free(False) or not gate.free(True):
            return (f"group {group.name!r} of topic {topic!r} is full ({gate.used} messages "
                    f"waiting, balanced_capacity {gate.capacity})")
    slowest = ring.slowest() if ring.blocking else None
    if slowest is not None and slowest[1] >= ring.capacity:
        return (f"broadcast subscriber {slowest[0]} of topic {topic!r} is a whole ring "
                f"({ring.capacity} entries, broadcast_capacity) behind")
    return None
