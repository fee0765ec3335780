"""The future of a publish: a `concurrent.futures.Future` that cannot be cancelled.

It is the future of every Publisher message (its id) and of every ``topic.publish``
(its `Outcome`). It uses only `Future`'s public API: every read and every resolution
goes through `Future`'s own condition, so it is correct on any interpreter, with or
without a GIL. A publish is on its way once accepted, so ``cancel()`` returns False
(as Google Pub/Sub's publish futures do); that also keeps its settler the only writer
of its state.

Each future has one settler: the Publisher for an id; for an outcome, the ledger's
completion of its track, which happens once, under the ledger's lock. `resolve` and
`resolve_all` are that settler's calls; `fail_future` fails one that may already be
done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

__all__ = ["MessageFuture", "fail_future", "resolve", "resolve_all"]

T = TypeVar("T")


class MessageFuture(Future[T]):
    """A `concurrent.futures.Future` that refuses to be cancelled (``cancel()`` is False)."""

    def cancel(self) -> bool:
        """Never cancels: the message is published (or fails) either way. Returns False."""
        return False

    def __deepcopy__(self, memo: dict[int, Any]) -> MessageFuture[T]:
        """The future itself: one message has one future, shared, never copied (so
        ``dataclasses.asdict`` of a `PublishReport` keeps its outcome)."""
        return self


def resolve(future: Future[T], result: T) -> None:
    """``set_result`` by the future's settler.

    Raises:
        InvalidStateError: the future is already done.
    """
    future.set_result(result)


def resolve_all(futures: Sequence[Future[T] | None], results: Sequence[T]) -> None:
    """``set_result`` for each pair, in order; a future already done (or cancelled, for
    a plain `Future` of the caller's), or None (no future kept), is skipped."""
    for future, result in zip(futures, results, strict=True):
        if future is not None:
            with contextlib.suppress(InvalidStateError):
                future.set_result(result)


def fail_future(future: Future[Any] | None, error: BaseException) -> None:
    """``set_exception``, unless the future is already done (or cancelled, for a plain
    `Future` of the caller's), or None (no future kept)."""
    if future is None:
        return
    with contextlib.suppress(InvalidStateError):
        future.set_exception(error)
