"""Publish futures nobody can observe any more: dropped from their batch, pending ones reused.

A Publisher holds each message's future until its batch is confirmed. Most callers
discard the future at once; resolving such a future changes nothing anyone can see, and
holding thousands of them makes every garbage collection walk them. `drop_unreachable`
finds them by reference count when the Publisher drains what was published.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future
from operator import attrgetter
from typing import TypeVar, cast
from weakref import getweakrefcount

from runtime.core._future import _PENDING, MessageFuture

__all__ = ["drop_unreachable"]

T = TypeVar("T")


def _held_only_by_a_list() -> int:
    """What `sys.getrefcount`, mapped over a list, reports for an item nothing else holds."""
    probe: list[object] = [MessageFuture()]
    return next(map(sys.getrefcount, probe))


_MADE = attrgetter("_made")
_STATE = attrgetter("_state")
# -1 where reference counts say nothing reliable (no counts, or no GIL): nothing is dropped.
_ALONE = (
    _held_only_by_a_list()
    if hasattr(sys, "getrefcount") and getattr(sys, "_is_gil_enabled", lambda: True)()
    else -1
)


def drop_unreachable(
    futures: list[MessageFuture[T]], spares: list[MessageFuture[T]], limit: int
) -> list[Future[T] | None]:
    """``futures``, with None in place of each future that nobody can ever observe.

    That is one this list holds the only reference to, with no weak reference and no
    condition (no callback, no waiter). Only a holder (a variable, a list, the stack of
    a ``publish`` not yet returned) can add either, so it stays unobservable: resolving
    it would change nothing, and keeping it until its batch is confirmed makes every
    collection walk it. A dropped one still pending is as good as new: it goes to
    ``spares`` (while they hold fewer than ``limit``) for a later ``publish`` to reuse.
    """
    counts = list(map(sys.getrefcount, futures)) if _ALONE > 0 else []
    alone = counts.count(_ALONE)
    if not alone:  # every future is held: the list as it is
        return cast("list[Future[T] | None]", futures)
    if alone == len(futures) and _pristine(futures):  # none is held: in C calls
        spares += futures[:max(0, limit - len(spares))]
        return [None] * alone
    kept: list[Future[T] | None] = list(futures)
    for index, count in enumerate(counts):
        future = futures[index]
        if count == _ALONE and future._made is None and getweakrefcount(future) == 0:
            kept[index] = None
            if future._state is _PENDING and len(spares) < limit:
                spares.append(future)
    return kept


def _pristine(futures: list[MessageFuture[T]]) -> bool:
    """Whether every future is pending, without a condition or a weak reference (C calls)."""
    return (
        list(map(_STATE, futures)).count(_PENDING) == len(futures)
        and list(map(_MADE, futures)).count(None) == len(futures)
        and not any(map(getweakrefcount, futures))
    )
