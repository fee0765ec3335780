"""Bulk acks for the lease log: one settlement message per hand-over, not per delivery.

A cumulative ack settles a whole range of leased deliveries at once. Acked one by one,
each would be a mailbox message to the topic's tracker; the group hands deliveries
over in batches (one `HandOver` per batch), so consecutive leased deliveries share a
hand-over, and each run of them is acked under the hand-over's buffer and sent as one
list — the same path a thread member's handler batch takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from operator import attrgetter
from typing import Any

from runtime.core.settlement._delivery import Delivery, HandOver

__all__ = ["ack_in_bulk"]

_handover_of = attrgetter("_handover")


def ack_in_bulk(deliveries: Sequence[Any]) -> int:
    """Ack ``deliveries`` (topic `Delivery` objects); skip ones settled meanwhile.

    Returns how many were skipped (their deadline or the topic's close settled them).
    Must not run concurrently for deliveries of one hand-over (the lease log settles
    one ack at a time). Never blocks.
    """
    acked = 0
    for handover, run in groupby(deliveries, key=_handover_of):
        acked += _ack_run(handover, run)
    return len(deliveries) - acked


def _ack_run(handover: HandOver, deliveries: Iterable[Delivery[Any]]) -> int:
    handover.open_buffer()
    try:
        for delivery in deliveries:
            delivery._ack_if_pending()  # settled by a deadline or a close: skipped
    finally:
        settled = handover.close_buffer()
        if settled and handover.sink is not None:
            handover.sink.tell(settled)
    return len(settled)
