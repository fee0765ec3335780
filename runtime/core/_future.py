"""The future a Publisher returns: a `concurrent.futures.Future` with a lazy condition.

A stock ``Future()`` builds a ``threading.Condition`` (an RLock, a deque and five bound
methods) at once: about 1.5 µs and ten objects for the garbage collector per published
message, most of them never used, since most publish futures are never waited on.
`MessageFuture` creates the condition only when something needs it (waiting in
``result()`` or ``exception()``, ``add_done_callback``, ``wait``/``as_completed``,
``repr``), and resolves without it when nothing does. Reading a resolved future takes no
lock (it never changes again). Every other behaviour is `Future`'s own.

It is the future of every Publisher message (its id) and of every ``topic.publish``
(its `Outcome`). With 20,000-100,000 outcomes held, a one-at-a-time ``topic.publish``
cost its thread 13-22 µs of CPU with the stock future and 7-10 µs with this one: every
held condition is more for each garbage collection to walk.

Why the lock-free resolve is safe: each future has one settler (the Publisher for an
id; for an outcome, the ledger's completion of its track, which happens once, under
the ledger's lock), and, as in Google Pub/Sub's client, it cannot be cancelled, so
nothing else ever writes its state. Every reader of the state takes the condition, and the settler
re-checks for a condition after writing the state (CPython's GIL orders these plain
attribute accesses). A reader that created the condition before that re-check is woken
under the lock; one that creates it later sees the final state.

Why the six attributes are slots, all set by ``__init__``: CPython 3.11 keeps an
instance's attributes in an array laid out by keys its class shares, and each new
instance shrinks the room left for new keys. A class whose first instances set no
attributes (as this one once did, to be cheap) ends up with no room: every later first
store of an attribute builds the instance's ``__dict__`` instead. That build
allocates, so it can run a garbage collection whose finalizers switch threads, and a
second thread can build a second dict from the same array; the interpreter later
frees it twice. CI crashed so once (SIGSEGV; under gdb, in ``dictresize`` of such a
dict). `tests/support/future_stress.py` reproduces it at once. In slots the attributes
never touch that array (no ``__dict__`` is built unless someone stores another
attribute), and they sit in the future's own memory. The Publisher then read every
future of a drain three or four times (`drop_unreachable`; now twice while no future
was touched, see `touch_mark`): for 10,000 futures shuffled among other allocations,
as spares lie in memory, that took 260-299 ns per future with the values in their
separate array and 166 in slots (/tmp/prof/futslots.py; the cause, cache misses on
the separate array, is inferred). The creating thread still stores all
six: a slot read before it is written raises.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar, cast

__all__ = ["MessageFuture", "fail_future", "resolve", "resolve_all", "touch_mark"]

T = TypeVar("T")

# The state names concurrent.futures uses (stable since Python 3.2).
_PENDING = "PENDING"
_FINISHED = "FINISHED"

# Taken only to build a future's condition, once per future that is ever waited on.
_CREATING = threading.Lock()
# The last touch of any MessageFuture: a new object, stored whenever a future is used
# beyond being published and resolved by its settler (`resolve`): its condition built
# (a waiter, a callback, a repr), or `set_result`, `set_exception` (failures by the
# settler too: rare) or `set_running_or_notify_cancel` called. One store, atomic under
# the GIL; see `touch_mark`.
_LAST_TOUCH: list[object] = [object()]


def touch_mark() -> object:
    """The last touch. While ``touch_mark()`` still returns the same object, no future
    was touched since it was read: every future published after that read is as
    `MessageFuture()` made it (pending, no condition). Weak references are no touch:
    `drop_unreachable` counts them itself."""
    return _LAST_TOUCH[0]


class MessageFuture(Future[T]):
    """A `concurrent.futures.Future` that builds its condition on first use.

    It cannot be cancelled: a publish is on its way once accepted (``cancel()`` returns
    False, as Google Pub/Sub's publish futures do).
    """

    __slots__ = ("_done_callbacks", "_exception", "_made", "_result", "_state", "_waiters")

    def __init__(self) -> None:
        # Not Future.__init__, which builds the condition at once. Every slot, here,
        # in the creating thread: see the module docstring for why.
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._made: threading.Condition | None = None
        # The lists come with the condition: Future touches them only holding it. Until
        # then, empty tuples: iterating finds nothing, appending would fail loudly.
        self._waiters: Any = ()
        self._done_callbacks: Any = ()

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        condition = self._made
        if condition is None:
            with _CREATING:  # racing first users end up sharing one condition
                condition = self._made
                if condition is None:
                    _LAST_TOUCH[0] = object()
                    # The lists exist before the condition does: whoever sees it sees them.
                    self._waiters = []
                    self._done_callbacks = []
                    condition = self._made = threading.Condition()
        return condition

    def cancel(self) -> bool:
        """Never cancels: the message is published (or fails) either way. Returns False."""
        return False

    # A finished future never changes again, so reading it needs no lock: these skip
    # building the condition (ten objects for the collector) that `Future` takes to read.
    def done(self) -> bool:
        """True once resolved or failed."""
        return self._state is _FINISHED or super().done()

    def result(self, timeout: float | None = None) -> T:
        """The result; raises the failure, or `TimeoutError` after ``timeout`` seconds."""
        if self._state is _FINISHED and self._exception is None:
            return cast(T, self._result)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The failure, None once resolved; `TimeoutError` after ``timeout`` seconds."""
        if self._state is _FINISHED:
            return self._exception
        return super().exception(timeout)

    def set_result(self, result: T) -> None:
        """Resolve with ``result``; lock-free unless someone waits or listens.

        Raises:
            InvalidStateError: the future is already done.
        """
        _LAST_TOUCH[0] = object()
        self._resolve(result)

    def set_exception(self, exception: BaseException | None) -> None:
        """Fail with ``exception`` (under the condition, as `Future` does).

        Raises:
            InvalidStateError: the future is already done.
        """
        _LAST_TOUCH[0] = object()
        super().set_exception(exception)

    def set_running_or_notify_cancel(self) -> bool:
        """`Future`'s: marks the future running (it cannot have been cancelled)."""
        _LAST_TOUCH[0] = object()
        return super().set_running_or_notify_cancel()

    def _resolve(self, result: T) -> None:
        """`set_result` by the future's settler, which is no touch (`touch_mark`)."""
        if self._made is None and self._state is _PENDING:
            self._result = result
            self._state = _FINISHED
            if self._made is not None:  # a reader arrived meanwhile
                self._wake()
            return
        super().set_result(result)

    def _wake(self) -> None:
        """Wake the readers of a future resolved without its lock, under the lock."""
        with self._condition:
            for waiter in self._waiters:
                waiter.add_result(self)
            self._condition.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]


def resolve_all(futures: Sequence[Future[T] | None], results: Sequence[T]) -> None:
    """``set_result`` for each pair, in order; a future already done, or None (dropped
    by `drop_unreachable`), is skipped.

    The Publisher resolves a whole batch here. A `MessageFuture` nobody has touched
    takes `MessageFuture.set_result`'s lock-free path, inlined, without a call per
    future.
    """
    if not any(futures):  # all dropped (a future is true: it defines no __bool__)
        return
    for future, result in zip(futures, results, strict=True):
        if future is None:
            continue
        if future.__class__ is MessageFuture and future._made is None:
            if future._state is _PENDING:
                future._result = result
                future._state = _FINISHED
                if future._made is not None:
                    future._wake()
            continue
        with contextlib.suppress(InvalidStateError):
            resolve(future, result)


def resolve(future: Future[T], result: T) -> None:
    """``set_result`` by the future's settler: a `MessageFuture` takes its lock-free path
    and counts no touch (`touch_mark`).

    Raises:
        InvalidStateError: the future is already done.
    """
    if future.__class__ is MessageFuture:
        cast("MessageFuture[T]", future)._resolve(result)
    else:
        future.set_result(result)


def fail_future(future: Future[Any] | None, error: BaseException) -> None:
    """``set_exception``, unless the future is already done (or cancelled, for a plain
    `Future` of the caller's), or None (`drop_unreachable` dropped it)."""
    if future is None:
        return
    with contextlib.suppress(InvalidStateError):
        future.set_exception(error)
