"""Publisher flow control: its settings (`FlowControl`) and the gate that applies them.

A message is *outstanding* from its admission in ``Publisher.publish`` until the topic
confirms it, fails it, or the publisher gives up on it (paused key, close). The gate
counts what is outstanding; callers acquire capacity before they enqueue a message and
the Publisher actor releases it, once per message, when the message's future resolves.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from runtime.errors import FlowControlError, PublishError

__all__ = ["FlowControl", "FlowGate", "LimitExceeded"]

LimitExceeded = Literal["block", "error", "ignore"]

_LIMIT_BEHAVIOURS = ("block", "error", "ignore")


def _invalid(setting: str, detail: str, value: object) -> PublishError:
    return PublishError(f"Invalid flow control setting {setting}: {detail}, got {value!r}", 3)


def _check_limit(setting: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(setting, "must be None or an int >= 1", value)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowControl:
    """How many messages and bytes a Publisher may hold unconfirmed.

    Attributes:
        max_outstanding_messages: None (unlimited) or the most messages accepted but
            not yet confirmed.
        max_outstanding_bytes: None (unlimited) or the most bytes (``Message.size``)
            accepted but not yet confirmed.
        limit_exceeded: ``"block"`` waits first-come first-served, ``"error"`` raises
            `FlowControlError` at once, ``"ignore"`` never limits.
        block_timeout: None (wait as long as it takes) or the seconds (finite, >= 0)
            a blocked publish waits before it raises `FlowControlError`.

    Raises:
        PublishError: code 3 when a value is out of range.
    """

    max_outstanding_messages: int | None = None
    max_outstanding_bytes: int | None = None
    limit_exceeded: LimitExceeded = "block"
    block_timeout: float | None = None

    def __post_init__(self) -> None:
        _check_limit("max_outstanding_messages", self.max_outstanding_messages)
        _check_limit("max_outstanding_bytes", self.max_outstanding_bytes)
        if self.limit_exceeded not in _LIMIT_BEHAVIOURS:
            raise _invalid("limit_exceeded", "must be 'block', 'error' or 'ignore'",
                           self.limit_exceeded)
        timeout = self.block_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not math.isfinite(timeout) or timeout < 0
        ):
            raise _invalid("block_timeout", "must be None or a finite number >= 0", timeout)

    @property
    def limited(self) -> bool:
        """True when some limit applies (a limit is set and the behaviour is not ignore)."""
        return self.limit_exceeded != "ignore" and (
            self.max_outstanding_messages is not None or self.max_outstanding_bytes is not None
        )


_MESSAGES_EXCEEDED = "Flow control: max outstanding messages exceeded"
_BYTES_EXCEEDED = "Flow control: max outstanding bytes exceeded"


class _Waiter:
    """One blocked acquire: its size and how it was woken."""

    __slots__ = ("error", "event", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.event = threading.Event()
        self.error: BaseException | None = None


class FlowGate:
    """Thread-safe counter of outstanding messages and bytes with FIFO waiters.

    Callers admit every message before they enqueue it — `admit_now` (with `lock`
    held, so the enqueue happens under the same lock) or, when that refuses, `acquire`,
    which may block — and whoever settles it calls `release` exactly once. Blocked
    callers are admitted strictly in arrival order: a newcomer never overtakes a waiter.
    With no limit in force every message is still counted: `outstanding` is exact.

    Args:
        settings: the limits and the behaviour when they are exceeded.
        clock: the time source for ``block_timeout``.
    """

    def __init__(
        self, settings: FlowControl, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self.lock = threading.Lock()
        self._messages = 0
        self._bytes = 0
        self._waiters: deque[_Waiter] = deque()
        # True while some acquire is blocked: set under `lock`, read without it as a hint.
        self.congested = False
        self._closed: Callable[[], BaseException] | None = None
        self._apply(settings)

    @property
    def outstanding(self) -> tuple[int, int]:
        """The (messages, bytes) accepted and not yet released."""
        with self.lock:
            return self.outstanding_locked()

    def outstanding_locked(self) -> tuple[int, int]:
        """`outstanding` for a caller that holds `lock`."""
        return self._messages, self._bytes

    @property
    def waiting(self) -> int:
        """How many acquires are blocked."""
        with self.lock:
            return len(self._waiters)

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed is not None

    def admit_now(self, sizes: Sequence[int], start: int, end: int) -> int:
        """Admit messages ``start`` to ``end - 1`` of ``sizes``, in order, while they fit
        with nobody waiting; the caller holds `lock`.

        Returns where admission stopped (``end`` when all were admitted); the message
        there must go through `acquire` instead.

        Raises:
            BaseException: the error `close` was given, once the gate is closed.
        """
        if self._closed is not None:
            raise self._closed()
        if self._waiters:
            return start
        count, nbytes = end - start, sum(sizes[start:end])
        if self._messages + count <= self._max_messages and (
            self._bytes + nbytes <= self._max_bytes
        ):  # all of them: the usual case, and always without limits
            self._messages += count
            self._bytes += nbytes
            return end
        for index in range(start, end):  # one by one, up to the first that does not fit
            if not self.admit_one(sizes[index]):
                return index
        return end

    def admit_one(self, size: int) -> bool:
        """Admit one message of ``size`` bytes if it fits with nobody waiting; the caller
        holds `lock`. False when it must go through `acquire` instead.

        Raises:
            BaseException: the error `close` was given, once the gate is closed.
        """
        if self._closed is not None:
            raise self._closed()
        if self._waiters or self._messages >= self._max_messages or (
            self._bytes + size > self._max_bytes
        ):
            return False
        self._messages += 1
        self._bytes += size
        return True

    def acquire(self, size: int, *, on_block: Callable[[], None] | None = None) -> bool:
        """Admit one message of ``size`` bytes, blocking under the ``"block"`` behaviour.

        Blocks at most ``block_timeout`` seconds. ``on_block`` runs once, outside the
        lock, before the caller starts waiting (the Publisher sends its pending batches
        there, so a lone thread can always make progress).

        Returns:
            True when the call had to wait, False when it was admitted at once.

        Raises:
            FlowControlError: code 8 when the limits are exceeded under ``"error"``, when
                ``block_timeout`` expires, or when the message could never fit.
            BaseException: the error `close` was given, once the gate is closed.
        """
        with self.lock:
            if self.admit_now((size,), 0, 1):
                return False
            settings = self._settings
            if _too_big(size, settings):
                raise FlowControlError(_BYTES_EXCEEDED)
            if settings.limit_exceeded == "error":
                raise self._exceeded(size)
            waiter = _Waiter(size)
            self._waiters.append(waiter)
            self.congested = True
        if on_block is not None:
            on_block()
        self._wait(waiter, settings.block_timeout)
        return True

    def release(self, messages: int, nbytes: int) -> None:
        """Return the capacity of ``messages`` settled messages of ``nbytes`` in all.

        Never blocks. Admits waiters from the head of the queue while they fit.
        """
        with self.lock:  # the body of `release_locked`: one call on the actor's path
            if messages > self._messages or nbytes > self._bytes:
                raise self._over_released(messages, nbytes)
            self._messages -= messages
            self._bytes -= nbytes
            if self._waiters:
                self._admit_waiters()

    def release_locked(self, messages: int, nbytes: int) -> None:
        """`release` for a caller that holds `lock`."""
        if messages > self._messages or nbytes > self._bytes:
            raise self._over_released(messages, nbytes)
        self._messages -= messages
        self._bytes -= nbytes
        if self._waiters:
            self._admit_waiters()

    def _over_released(self, messages: int, nbytes: int) -> RuntimeError:
        return RuntimeError(f"flow control released more than outstanding: {messages}/{nbytes} "
                            f"> {self.outstanding_locked()}")

    def update(self, settings: FlowControl) -> None:
        """Apply new limits: wake waiters that now fit, fail those that never can."""
        with self.lock:
            self._apply(settings)
            for waiter in list(self._waiters):
                if _too_big(waiter.size, settings):
                    self._waiters.remove(waiter)
                    self._wake(waiter, FlowControlError(_BYTES_EXCEEDED))
            self._admit_waiters()

    def close(self, error: Callable[[], BaseException]) -> None:
        """Refuse every later admission with ``error()`` and wake blocked ones with it."""
        with self.lock:
            self._closed = error
            while self._waiters:
                self._wake(self._waiters.popleft(), error())
            self.congested = False

    def _apply(self, settings: FlowControl) -> None:
        self._settings = settings
        unlimited = sys.maxsize
        ignore = settings.limit_exceeded == "ignore"
        max_messages = settings.max_outstanding_messages
        max_bytes = settings.max_outstanding_bytes
        # Plain integers keep the fast path free of None and mode checks.
        self._max_messages = unlimited if ignore or max_messages is None else max_messages
        self._max_bytes = unlimited if ignore or max_bytes is None else max_bytes

    def _wait(self, waiter: _Waiter, timeout: float | None) -> None:
        deadline = None if timeout is None else self._clock() + timeout
        while not waiter.event.wait(_slice(deadline, self._clock)):
            if deadline is not None and self._clock() >= deadline:
                expired = self._withdraw(waiter)
                if expired is not None:
                    raise expired
        if waiter.error is not None:
            raise waiter.error

    def _withdraw(self, waiter: _Waiter) -> FlowControlError | None:
        """Withdraw a waiter whose time ran out; None if it was woken meanwhile."""
        with self.lock:
            if waiter.event.is_set():
                return None
            self._waiters.remove(waiter)
            # A withdrawn head may have been all that kept the others out.
            self._admit_waiters()
            return self._exceeded(waiter.size)

    def _admit_waiters(self) -> None:
        while self._waiters and self._fits(self._waiters[0].size):
            waiter = self._waiters.popleft()
            self._messages += 1
            self._bytes += waiter.size
            waiter.event.set()
        self.congested = bool(self._waiters)

    def _fits(self, size: int) -> bool:
        return self._messages < self._max_messages and self._bytes + size <= self._max_bytes

    def _exceeded(self, size: int) -> FlowControlError:
        if self._messages >= self._max_messages:
            return FlowControlError(_MESSAGES_EXCEEDED)
        if self._bytes + size > self._max_bytes:
            return FlowControlError(_BYTES_EXCEEDED)
        # Only waiters ahead keep this message out: report the limit they exhaust.
        limited_by_bytes = self._settings.max_outstanding_bytes is not None
        return FlowControlError(_BYTES_EXCEEDED if limited_by_bytes else _MESSAGES_EXCEEDED)

    @staticmethod
    def _wake(waiter: _Waiter, error: BaseException) -> None:
        waiter.error = error
        waiter.event.set()


def _slice(deadline: float | None, clock: Callable[[], float]) -> float:
    """The next bounded wait: at most a second, at most until ``deadline``."""
    if deadline is None:
        return 1.0
    return min(1.0, max(0.0, deadline - clock()))


def _too_big(size: int, settings: FlowControl) -> bool:
    """True when a message of ``size`` could never fit, even with nothing outstanding."""
    max_bytes = settings.max_outstanding_bytes
    return settings.limited and max_bytes is not None and size > max_bytes
