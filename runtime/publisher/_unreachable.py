"""Publish futures the Publisher holds until their batch is confirmed.

`drop_unreachable` once guessed, from reference counts, which futures nobody held and
dropped (and reused) them. Reference counts are an interpreter detail (CPython 3.14
counts stack references differently), so nothing is guessed any more: every future is
kept and resolved. The call stays until the Publisher drops it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TypeVar, cast

from runtime.core._future import MessageFuture

__all__ = ["drop_unreachable"]

T = TypeVar("T")


def drop_unreachable(
    futures: list[MessageFuture[T]], spares: list[MessageFuture[T]], limit: int,
    since: object = None,
) -> list[Future[T] | None]:
    """``futures`` as they are: every future is kept (and no spare is made)."""
    return cast("list[Future[T] | None]", futures)
