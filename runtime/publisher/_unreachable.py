"""Publish futures nobody can observe any more: dropped from their batch, pending ones reused.

A Publisher holds each message's future until its batch is confirmed. Most callers
discard the future at once; resolving such a future changes nothing anyone can see, and
holding thousands of them makes every garbage collection walk them. `drop_unreachable`
finds them by reference count when the Publisher drains what was published.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import Future
from itertools import compress, repeat
from operator import attrgetter, eq, getitem
from typing import TypeVar, cast
from weakref import getweakrefcount

from runtime.core._future import _PENDING, MessageFuture, touch_mark

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
    futures: list[MessageFuture[T]], spares: list[MessageFuture[T]], limit: int,
    since: object = None,
) -> list[Future[T] | None]:
    """``futures``, with None in place of each future that nobody can ever observe.

    That is one this list holds the only reference to, with no weak reference and no
    condition (no callback, no waiter). Only a holder (a variable, a list, the stack of
    a ``publish`` not yet returned) can add either, so it stays unobservable: resolving
    it would change nothing, and keeping it until its batch is confirmed makes every
    collection walk it. A dropped one still pending is as good as new: it goes to
    ``spares`` (while they hold fewer than ``limit``) for a later ``publish`` to reuse.

    ``since`` is a `touch_mark` read before any of ``futures`` was published. While it
    is still the mark, none was touched (no condition, still pending), so only the
    reference counts and weak references are read; otherwise each future is checked.
    """
    counts = list(map(sys.getrefcount, futures)) if _ALONE > 0 else []
    alone = counts.count(_ALONE)
    if not alone:  # every future is held: the list as it is
        return cast("list[Future[T] | None]", futures)
    kept: list[Future[T] | None]
    if alone == len(futures):
        free, kept = futures, [None] * alone
    else:  # some held (a publish still returning its future, one a caller keeps)
        free, kept = _split(futures, counts, len(futures) - alone)
    # The counts come first: a future touched after them was held when they were read.
    if (since is touch_mark() and not any(map(getweakrefcount, free))) or (
        alone == len(futures) and _pristine(futures)
    ):  # all in C calls
        spares += free[:max(0, limit - len(spares))]
        return kept
    return _drop_each(futures, counts, spares, limit)


def _split(
    futures: list[MessageFuture[T]], counts: list[int], held: int,
) -> tuple[list[MessageFuture[T]], list[Future[T] | None]]:
    """(the futures nothing else holds, ``futures`` with None in their place), in C calls.

    The held ones are most often the last few: a ``publish`` still returning its
    future, the caller's variable holding the one before. Then two slices do.
    """
    cut = len(futures) - held
    if counts[:cut].count(_ALONE) == cut:
        return futures[:cut], [*([None] * cut), *futures[cut:]]
    unheld = list(map(eq, counts, repeat(_ALONE)))
    pick: Callable[[tuple[Future[T], None], bool], Future[T] | None] = getitem
    kept = list(map(pick, zip(futures, repeat(None)), unheld))  # (future, None)[unheld]
    return list(compress(futures, unheld)), kept


def _drop_each(
    futures: list[MessageFuture[T]], counts: list[int], spares: list[MessageFuture[T]],
    limit: int,
) -> list[Future[T] | None]:
    """`drop_unreachable` future by future: some may have a condition or a weak reference."""
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
