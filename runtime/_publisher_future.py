"""The future a Publisher returns: a `concurrent.futures.Future` with a lazy condition.

A stock ``Future()`` builds a ``threading.Condition`` (an RLock, a deque and five bound
methods) at once: about 1.5 µs and ten objects for the garbage collector per published
message, most of them never used, since most publish futures are never waited on.
`MessageFuture` creates the condition only when something needs it (``result()``,
``add_done_callback``, ``wait``/``as_completed``, ``cancel``, ``repr``), and resolves
without it when nothing does. Every other behaviour is `Future`'s own.

Why the lock-free resolve is safe: every reader of the state takes the condition, and
the resolver re-checks for a condition after writing the state (CPython's GIL orders
these plain attribute accesses). A reader that created the condition before that
re-check is woken under the lock; one that creates it later sees the final state. The
state is written with ``dict.setdefault`` (atomic): a ``cancel`` that wrote its state
first wins, and one that read PENDING just before the resolver wrote leaves CANCELLED
behind, which the wake-up sees under the lock, so callbacks run once either way.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

__all__ = ["MessageFuture", "fail_future", "resolve_all"]

T = TypeVar("T")

# The state names concurrent.futures uses (stable since Python 3.2).
_PENDING = "PENDING"
_FINISHED = "FINISHED"
_CONDITION = "_message_future_condition"


class MessageFuture(Future[T]):
    """A `concurrent.futures.Future` that builds its condition on first use."""

    # A fresh future's state lives in these class defaults (the instance dict is filled
    # only as it changes), so creating one runs no Python code at all.
    _state = _PENDING
    _result: Any = None
    _exception: BaseException | None = None
    # ``_waiters`` and ``_done_callbacks`` come with the condition: Future only ever
    # touches them holding it, so a future nobody waits on never allocates them.
    __init__ = object.__init__  # Future.__init__ would build the condition eagerly

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        namespace = self.__dict__
        condition = namespace.get(_CONDITION)
        if condition is None:
            # setdefault is atomic: racing first users end up sharing one of each; the
            # lists exist before the condition does, so whoever sees it sees them.
            namespace.setdefault("_waiters", [])
            namespace.setdefault("_done_callbacks", [])
            condition = namespace.setdefault(_CONDITION, threading.Condition())
        return condition  # type: ignore[no-any-return]

    def set_result(self, result: T) -> None:
        """Resolve with ``result``; lock-free unless someone waits or listens.

        Raises:
            InvalidStateError: the future is already done or cancelled.
        """
        namespace = self.__dict__
        if _CONDITION in namespace or "_state" in namespace:
            super().set_result(result)
            return
        _resolve_unlocked(self, namespace, result)

    def _wake(self) -> None:
        """Wake the readers of a future resolved without its lock, under the lock;
        nothing when a racing ``cancel`` overwrote the state meanwhile."""
        with self._condition:
            if self._state != _FINISHED:
                return
            for waiter in self._waiters:
                waiter.add_result(self)
            self._condition.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]


def _resolve_unlocked(future: MessageFuture[Any], namespace: dict[str, Any], result: Any) -> None:
    """Resolve a future that had no condition and no state of its own a moment ago."""
    namespace["_result"] = result
    if namespace.setdefault("_state", _FINISHED) is not _FINISHED:
        return  # a cancel got there first: it settled the future
    if _CONDITION in namespace:  # a reader arrived meanwhile
        future._wake()


def resolve_all(futures: list[Future[T]], results: list[T]) -> None:
    """``set_result`` for each pair, in order; a future already done (cancelled) is skipped.

    The Publisher resolves a whole batch here. A `MessageFuture` nobody has touched has
    an empty instance dict (no condition, no state of its own): it takes
    `_resolve_unlocked`'s path, inlined, without a call per future.
    """
    for future, result in zip(futures, results, strict=True):
        namespace = future.__dict__
        if not namespace and future.__class__ is MessageFuture:
            namespace["_result"] = result
            if namespace.setdefault("_state", _FINISHED) is not _FINISHED:
                continue  # a cancel got there first: it settled the future
            if _CONDITION in namespace:  # a reader arrived meanwhile
                future._wake()  # type: ignore[attr-defined]
            continue
        with contextlib.suppress(InvalidStateError):
            future.set_result(result)


def fail_future(future: Future[Any], error: BaseException) -> None:
    """``set_exception``, unless the future is already done (cancelled by its caller)."""
    with contextlib.suppress(InvalidStateError):
        future.set_exception(error)
