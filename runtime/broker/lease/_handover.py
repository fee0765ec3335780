"""How the lease log takes hand-overs in, settles them on an ack and gives them back.

The group pushes a lease member whole `Tranche` hand-overs. The log keeps their rows as
columns (`LeaseColumns`) and, per offset, the owner (the tranche, or a plain delivery
from a member that is not a lease member) and the message's index in it. These
functions work on that state; `LeaseLog` owns it and its lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from itertools import groupby, repeat
from typing import Any, Protocol

from runtime.broker.lease._record import (
    LeaseColumns,
    LeasedDelivery,
    PayloadError,
    envelope_columns,
    record_of,
)
from runtime.core.settlement._claims import nack_all
from runtime.core.settlement._delivery import Delivery, Tranche

__all__ = [
    "EXPIRED_REASON",
    "LeaseSource",
    "Piece",
    "ack_each",
    "hold",
    "receive_pieces",
    "release_held",
    "settle_acked",
]

logger = logging.getLogger(__name__)

EXPIRED_REASON = "lease expired"
# A part of a hand-over: the tranche and the indexes of its messages (a plain delivery,
# from a member that is not a lease member, has no indexes).
Piece = tuple[Any, "Sequence[int] | None"]
Reject = Callable[[LeasedDelivery, str], None]


class LeaseSource(Protocol):
    """The group membership a lease log pulls from: a lease member (``tranches``, read
    with ``receive_tranches``) or any pull member (``receive_many``)."""

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[LeasedDelivery]: ...

    def extend(self, deliveries: Sequence[LeasedDelivery]) -> int: ...

    def unsubscribe(self) -> None: ...

    def _unread(self) -> int: ...


def receive_pieces(source: LeaseSource, missing: int, linger: float) -> list[Piece]:
    """Up to about ``missing`` messages from ``source``, waiting at most ``linger``
    (`TimeoutError` when none came)."""
    if not getattr(source, "tranches", False):
        return [(d, None) for d in source.receive_many(missing, timeout=linger)]
    pieces: list[Piece] = []
    tranches: list[Tranche] = source.receive_tranches(  # type: ignore[attr-defined]
        missing, timeout=linger)
    for tranche in tranches:
        if tranche.whole():
            pieces.append((tranche, range(len(tranche.envelopes))))
        else:  # a deadline or a sweep settled some while it waited
            pieces.append((tranche, [i for i, d in enumerate(tranche.unpack()) if d.pending]))
    return pieces


def hold(
    columns: LeaseColumns, owners: list[Any], held_indexes: list[int],
    owner: Any, indexes: Sequence[int] | None, reject: Reject,
) -> int:
    """Append ``owner``'s messages (at ``indexes``) as rows; returns how many it held
    (those that cannot be encoded are rejected instead)."""
    if indexes is None:  # one delivery
        try:
            record = record_of(owner)
        except PayloadError as exc:
            reject(owner, str(exc))
            return 0
        columns.append(record)
        owners.append(owner)
        held_indexes.append(-1)
        return 1
    held = _hold_tranche(columns, owner, indexes, reject)
    owners.extend(repeat(owner, len(held)))
    held_indexes.extend(held)
    return len(held)


def _hold_tranche(
    columns: LeaseColumns, owner: Tranche, indexes: Sequence[int], reject: Reject,
) -> list[int]:
    envelopes = owner.envelopes
    if type(indexes) is not range or indexes.step != 1:
        envelopes = list(map(envelopes.__getitem__, indexes))
    elif len(indexes) != len(envelopes):  # a part of a hand-over: a slice
        envelopes = envelopes[indexes.start:indexes.stop]
    ids, keys, payloads, attributes, times, bad = envelope_columns(envelopes, time.time())
    attempts = owner.attempts
    held = list(indexes)
    if bad:
        built = owner.unpack()
        for position, error in bad:
            reject(built[held[position]], error)
        refused = {position for position, _ in bad}
        held = [index for position, index in enumerate(held) if position not in refused]
    columns.message_id.extend(ids)
    columns.key.extend(keys)
    columns.payload.extend(payloads)
    columns.attributes.extend(attributes)
    columns.published_at.extend(times)
    columns.attempt.extend(
        repeat(1, len(held)) if attempts is None else map(attempts.__getitem__, held))
    return held


def settle_acked(
    owners: list[Any], indexes: list[int],
    ack_many: Callable[[Sequence[LeasedDelivery]], int],
) -> int:
    """Ack the held messages of ``owners`` (parallel to ``indexes``); returns how many
    had settled meanwhile. A tranche the range holds whole and that nothing else
    unpacked is claimed at once and sent to its sink as one message."""
    singles: list[Any] = []
    at = 0
    for _, run in groupby(owners, key=id):
        count = len(list(run))
        owner = owners[at]
        if owner is None:  # acked out of order before
            pass
        elif type(owner) is not Tranche:
            singles.append(owner)
        elif count == len(owner.envelopes) and owner.claim_whole():
            if owner.sink is not None:
                owner.sink.tell(owner)  # the tracker settles it whole
        else:
            built = owner.unpack()
            singles.extend(map(built.__getitem__, indexes[at:at + count]))
        at += count
    return ack_many(singles) if singles else 0


def release_held(
    source: LeaseSource | None, owners: list[Any], indexes: list[int], spares: list[Piece],
    read: Sequence[tuple[int, int]],
) -> int:
    """Give back what the consumer held and leave the group; returns how many it held.

    Rows in ``read`` (sorted, disjoint ``[first, last)`` row ranges a fetch served) are
    nacked: redelivered with attempt + 1, or dead-lettered. Rows no fetch served and
    the spares go back at their attempt: their hand-overs return to the member's buffer,
    which leaving the group claims back for the group. A plain delivery (from a member
    that is not a lease member) cannot be returned so: it is nacked, read or not.
    """
    nacked: list[Any] = []
    returned: dict[int, Tranche] = {}
    at = 0
    for first, last in [*read, (len(owners), len(owners))]:
        first, last = max(first, at), min(max(last, first), len(owners))
        for owner in owners[at:first]:  # unread
            if type(owner) is Tranche:
                returned.setdefault(id(owner), owner)
            elif owner is not None:
                nacked.append(owner)
        nacked += [owner if index < 0 else owner.unpack()[index]
                   for owner, index in zip(owners[first:last], indexes[first:last], strict=True)
                   if owner is not None]
        at = max(at, last)
    # Topic deliveries in bulk: one settlement message per sink, not one per delivery.
    _settle(lambda: nack_all([d for d in nacked if type(d) is Delivery], EXPIRED_REASON))
    for other in (d for d in nacked if type(d) is not Delivery):  # any other LeasedDelivery
        _settle(lambda d=other: d.nack(EXPIRED_REASON))  # type: ignore[misc]
    for owner, _ in spares:
        returned.setdefault(id(owner), owner)
    if source is not None:
        # Leaving the group claims what its buffer holds again, at the same attempt.
        give_back = getattr(source, "give_back", None)
        if give_back is not None and returned:
            give_back(list(returned.values()))
        _settle(source.unsubscribe)
    return sum(owner is not None for owner in owners)


def ack_each(deliveries: Sequence[LeasedDelivery]) -> int:
    """Ack one delivery at a time, skipping ones settled meanwhile; returns those skipped."""
    return sum(not _settle(delivery.ack) for delivery in deliveries)


def _settle(action: Callable[[], object]) -> bool:
    # A delivery may have settled on its own meanwhile (ack deadline, topic closed).
    try:
        action()
    except Exception as exc:  # settled meanwhile, or its topic is gone: nothing to undo
        logger.debug("lease settlement skipped: %s", exc)
        return False
    return True
