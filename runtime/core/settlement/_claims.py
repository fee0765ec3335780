"""Settling or inspecting many deliveries at once: the tracker's, the group's and the
lease log's bulk operations over `Delivery` and `HandOver`."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from runtime.core.settlement._delivery import ACKED, Delivery, HandOver

__all__ = ["all_acked", "claim_all", "fail_delivery", "handovers_of", "nack_all"]

_HANDOVER = attrgetter("_handover")
_STATE = attrgetter("_state")


def all_acked(deliveries: Sequence[Delivery[Any]]) -> bool:
    """True when every one of ``deliveries`` is acked (one C-level pass)."""
    return list(map(_STATE, deliveries)).count(ACKED) == len(deliveries)


def handovers_of(deliveries: Sequence[Delivery[Any]]) -> set[HandOver]:
    """The distinct hand-overs ``deliveries`` came in."""
    return set(map(_HANDOVER, deliveries))


def claim_all(handover: HandOver, reason: str) -> list[Delivery[Any]]:
    """Expire every still-pending delivery of ``handover`` with ``reason``; the ones won."""
    return [d for d in list(handover.unsettled().values()) if d._expire(reason)]


def nack_all(deliveries: Sequence[Delivery[Any]], error: str) -> int:
    """Nack every still-pending one of ``deliveries`` (category ``nack``, text ``error``),
    as `Delivery.nack` does, but in bulk: each sink gets one list of its settlements, not
    one message per delivery. Returns how many were nacked (the rest had settled)."""
    per_sink: dict[int, tuple[Any, list[Delivery[Any]]]] = {}
    for delivery in deliveries:
        if delivery._settle_failed("nack", error):
            sink = delivery._handover.sink
            per_sink.setdefault(id(sink), (sink, []))[1].append(delivery)
    for sink, settled in per_sink.values():
        sink.tell(settled)
    return sum(len(settled) for _, settled in per_sink.values())


def fail_delivery(delivery: Any, error: str) -> None:
    """Settle ``delivery`` like a handler that raised: category ``error``, text ``error``.

    For settlements made on a handler's behalf elsewhere (a remote consumer's ``fail``, a
    Spark task). A delivery settled meanwhile (deadline, close) is left alone.
    """
    delivery._fail_if_pending("error", error)
