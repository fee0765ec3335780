"""A message handed to one subscriber, and the hand-over that settles it exactly once.

A worker process gets its messages as one `Tranche`, a hand-over tracked as one record:
while nothing has gone wrong, the parent holds only the envelopes and their attempt
numbers; the worker's "all acked" answer settles the whole tranche with one atomic
claim. Per-message `Delivery` objects are built (`unpack`) only when they are needed: a
partial answer, a crashed worker, an expired deadline or the close sweep.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from itertools import count, repeat
from typing import Any, Generic, Protocol, TypeVar

from runtime.core._envelope import ATTRIBUTES, KEY, TOPIC, Envelope, message_id, message_of
from runtime.core._message import NO_ATTRIBUTES
from runtime.errors import SettlementError

__all__ = ["ACKED", "NACKED", "PENDING", "Delivery", "HandOver", "Sink", "Tranche"]

PENDING = "pending"
ACKED = "acked"
NACKED = "nacked"

T = TypeVar("T")
_get_ident = threading.get_ident
_NEVER = float("inf")


class Sink(Protocol):
    """Where settled deliveries go (the tracker's Ref, or a worker's reply list)."""

    def tell(self, message: Any) -> None:
        """Take one settled delivery or a list of them; never blocks."""


class HandOver:
    """A batch of deliveries handed to one subscriber at once.

    ``pending`` maps each unsettled delivery's index to it. Claiming a delivery is
    ``pending.pop(index, None)``: one atomic dict operation, so the subscriber's ack,
    the deadline sweep and the close sweep race safely and exactly one of them wins.
    While ``owner`` (a thread id) runs the handler, its settlements collect in
    ``buffer`` (a deque: the owner appends, `flush_buffer` may pop from another thread)
    and leave in few messages; settlements from other threads go alone.
    ``nacked`` turns True when one of its deliveries is nacked (before that delivery
    goes anywhere): with it a worker knows a batch was all acked without a pass.

    Args:
        sink: where settlements go.
        subscriber_id: the subscription the batch is for (-1: none).
        group: the balanced group, or None for broadcast.
    """

    __slots__ = (
        "buffer", "deadline", "group", "id", "nacked", "owner", "pending", "renew_at",
        "sink", "started", "subscriber_id",
    )

    def __init__(self, sink: Sink | None, subscriber_id: int, group: str | None) -> None:
        self.sink = sink
        self.subscriber_id = subscriber_id
        self.group = group
        self.pending: dict[int, Delivery[Any]] = {}
        self.buffer: deque[Delivery[Any]] | None = None
        self.owner = 0
        self.id = 0  # its number in the ledger's books (live while they hold it)
        # Its ack deadline, and when a handler reaching it should renew it: set by the
        # ledger's `Deadlines` alone, under the ledger's lock.
        self.deadline = 0.0
        self.renew_at = _NEVER
        self.nacked = False
        # Seconds its worker process has been running it (-inf: not started yet), for a
        # hand-over to a process member; None: its deadline runs from the hand-over.
        self.started: Callable[[], float] | None = None

    @classmethod
    def of(
        cls, sink: Sink | None, subscriber_id: int, group: str | None,
        envelopes: Sequence[Envelope], attempts: Sequence[int] | None = None,
    ) -> tuple[HandOver, list[Delivery[Any]]]:
        """A hand-over of ``envelopes`` (with their ``attempts``; None: all first ones)
        and its deliveries, all pending."""
        handover = cls(sink, subscriber_id, group)
        out: list[Delivery[Any]] = list(map(
            Delivery, envelopes, repeat(handover), count(),
            repeat(1) if attempts is None else attempts,
        ))
        handover.pending = dict(enumerate(out))
        return handover, out

    def hold(self, pending: dict[int, Delivery[Any]]) -> None:
        """Make ``pending`` (index -> delivery, a worker's lease included) its unsettled
        deliveries: they are handed over from now."""
        self.pending = pending

    def count_from(self, started: Callable[[], float]) -> None:
        """Count its ack deadline from its worker's start: ``started()`` reports the
        seconds since (``-inf``: not started yet)."""
        self.started = started

    def running_for(self) -> float:
        """Seconds since its subscriber started it: ``inf`` (long enough for any
        deadline) unless a worker process reports its start (``-inf``: not yet)."""
        started = self.started
        return _NEVER if started is None else started()

    def open_buffer(self) -> deque[Delivery[Any]]:
        """Start collecting this thread's settlements; returns the buffer."""
        self.owner = _get_ident()
        buffer: deque[Delivery[Any]] = deque()
        self.buffer = buffer
        return buffer

    def close_buffer(self) -> list[Delivery[Any]]:
        """Stop collecting; returns what is left in the buffer. Later settlements go to
        the sink one by one."""
        buffer = self.buffer
        self.buffer = None
        return [] if buffer is None else _drain(buffer)

    def flush_buffer(self) -> None:
        """Send what the buffer holds now (from any thread; the owner keeps collecting)."""
        buffer = self.buffer
        if buffer:
            settled = _drain(buffer)
            if settled and self.sink is not None:
                self.sink.tell(settled)

    def settled(self) -> bool:
        """True when nothing of it is pending any more."""
        return not self.pending

    def unsettled(self) -> dict[int, Delivery[Any]]:
        """The deliveries nothing has claimed yet, by index."""
        return self.pending


def _drain(buffer: deque[Delivery[Any]]) -> list[Delivery[Any]]:
    """Pop everything ``buffer`` holds now; each item goes to exactly one caller."""
    out: list[Delivery[Any]] = []
    try:
        while True:
            out.append(buffer.popleft())
    except IndexError:
        return out


class Delivery(Generic[T]):
    """One message handed to one subscriber; settle it with `ack` or `nack`.

    Settling is thread-safe and happens once: a second settlement, or one after the
    ack deadline or the topic's close, raises `SettlementError`.
    """

    # _failure (reason, error, timed_out), _cause (a raising handler's exception type and
    # traceback text) and _message are set only when needed.
    __slots__ = (
        "_attempt", "_cause", "_envelope", "_failure", "_handover", "_index", "_message", "_state",
    )
    _failure: tuple[str, str | None, bool]
    _cause: tuple[str, str]
    _message: T

    def __init__(self, envelope: Envelope, handover: HandOver, index: int, attempt: int) -> None:
        self._envelope = envelope
        self._handover = handover
        self._index = index
        self._attempt = attempt
        self._state = PENDING

    @classmethod
    def settled(
        cls, envelope: Envelope, subscriber_id: int, group: str | None, attempts: int,
        reason: str, error: str | None = None,
    ) -> Delivery[Any]:
        """A delivery that never reached a subscriber, already nacked with ``reason``."""
        delivery: Delivery[Any] = cls(envelope, HandOver(None, subscriber_id, group), 0, attempts)
        delivery._set_nacked(reason, error)
        return delivery

    @property
    def message(self) -> T:
        """The published message (a `Message` when it came through a Publisher)."""
        try:
            message: T = self._message
        except AttributeError:
            self._message = message = message_of(self._envelope)
        return message

    @property
    def message_id(self) -> str:
        """The id the topic gave the message."""
        return message_id(self._envelope)

    @property
    def topic(self) -> str:
        """The topic's name."""
        return self._envelope[TOPIC]

    @property
    def key(self) -> str | None:
        """The ordering key; None when there is none (or it was empty)."""
        return self._envelope[KEY]

    @property
    def attributes(self) -> dict[str, str]:
        """The message's string attributes."""
        attributes = self._envelope[ATTRIBUTES]
        return NO_ATTRIBUTES if attributes is None else attributes

    @property
    def subscriber_id(self) -> int:
        """The id of the subscription it was handed to (-1: none)."""
        return self._handover.subscriber_id

    @property
    def group(self) -> str | None:
        """The balanced group's name; None for a broadcast subscriber."""
        return self._handover.group

    @property
    def attempt(self) -> int:
        """1 for the first delivery, then one more per redelivery."""
        return self._attempt

    @property
    def state(self) -> str:
        """``"pending"``, ``"acked"`` or ``"nacked"``."""
        return self._state

    @property
    def reason(self) -> str | None:
        """The nack's category (``"nack"``, ``"timeout"``, ``"error"``, ...), or None."""
        failure = getattr(self, "_failure", None)
        return None if failure is None else failure[0]

    @property
    def error(self) -> str | None:
        """The nack's free text or the handler's exception text, or None."""
        failure = getattr(self, "_failure", None)
        return None if failure is None else failure[1]

    @property
    def pending(self) -> bool:
        """True until settled."""
        return self._state == PENDING

    @property
    def acked(self) -> bool:
        """True once acked."""
        return self._state == ACKED

    @property
    def nacked(self) -> bool:
        """True once nacked, timed out or force-nacked by close."""
        return self._state == NACKED

    @property
    def timed_out(self) -> bool:
        """True only when the ack deadline expired it."""
        failure = getattr(self, "_failure", None)
        return failure is not None and failure[2]

    def ack(self) -> None:
        """Settle as processed. Never blocks.

        Raises:
            SettlementError: already settled (also by a timeout or the topic's close).
        """
        handover = self._handover
        if handover.pending.pop(self._index, None) is None:
            raise SettlementError(message_id(self._envelope), self._settled_as())
        self._state = ACKED
        buffer = handover.buffer  # `_send`, inlined: acks are the hot path
        if buffer is not None and handover.owner == _get_ident():
            buffer.append(self)
        else:
            handover.sink.tell(self)  # type: ignore[union-attr]  # a claimed one has a sink

    def nack(self, reason: str = "nack") -> None:
        """Settle as failed; ``reason`` is free text kept as the dead letter's error.

        Never blocks. The category is always ``"nack"``; a bare ``nack()`` has no text.

        Raises:
            SettlementError: already settled (also by a timeout or the topic's close).
        """
        if self._handover.pending.pop(self._index, None) is None:
            raise SettlementError(message_id(self._envelope), self._settled_as())
        self._set_nacked("nack", None if reason == "nack" else reason)
        self._send()

    def __repr__(self) -> str:
        return (
            f"Delivery(topic={self.topic!r}, message_id={self.message_id!r}, "
            f"subscriber_id={self.subscriber_id}, attempt={self._attempt}, "
            f"state={self._state!r})"
        )

    def _settled_as(self) -> str:
        """How it was settled, for errors: ``"timed out"`` says the deadline won."""
        return "timed out" if self.timed_out else self._state

    def _claim(self) -> bool:
        return self._handover.pending.pop(self._index, None) is not None

    def _set_nacked(self, reason: str, error: str | None, *, timed_out: bool = False) -> None:
        self._failure = (reason, error, timed_out)
        self._state = NACKED
        self._handover.nacked = True

    def _send(self) -> None:
        handover = self._handover
        buffer = handover.buffer
        if buffer is not None and handover.owner == _get_ident():
            buffer.append(self)
        else:
            handover.sink.tell(self)  # type: ignore[union-attr]  # a claimed one has a sink

    def _ack_if_pending(self) -> None:
        """Ack unless something settled it already (auto-ack after the handler)."""
        if self._handover.pending.pop(self._index, None) is not None:
            self._state = ACKED
            self._send()

    def _fail_if_pending(
        self, reason: str, error: str | None, cause: tuple[str, str] | None = None,
    ) -> None:
        """Nack with ``reason`` (and a handler's ``cause``) unless something settled it."""
        if self._claim():
            self._set_nacked(reason, error)
            if cause is not None:
                self._cause = cause
            self._send()

    def _take_ack(self, pending: dict[int, Delivery[Any]]) -> bool:
        """`_settle_acked` for the handler loop, claiming through ``pending`` (its
        hand-over's, read as a plain dict: a lease's deadline is the loop's to check)."""
        if dict.pop(pending, self._index, None) is None:
            return False
        self._state = ACKED
        return True

    def _lapse(self) -> None:
        """Its worker's lease ran out before it settled (the lease dropped it): timed out."""
        self._set_nacked("timeout", None, timed_out=True)

    def _settle_acked(self) -> bool:
        """Claim and ack for a subscriber that reported the ack (a worker process); the
        caller sends it on. False when something settled it first."""
        if not self._claim():
            return False
        self._state = ACKED
        return True

    def _settle_failed(
        self, reason: str, error: str | None, cause: tuple[str, str] | None = None,
    ) -> bool:
        """Claim and nack with ``reason`` (and a handler's ``cause``); the caller sends it
        on. False when something settled it first."""
        if not self._claim():
            return False
        self._set_nacked(reason, error)
        if cause is not None:
            self._cause = cause
        return True

    def _withdraw(self) -> bool:
        """Claim it to hand its message back to the group unsettled (its subscriber never
        ran it): nothing is counted. False when something settled it first."""
        return self._claim()

    def _expire(self, reason: str) -> bool:
        """Claim for a sweep (``"timeout"`` or ``"closed"``); False when already settled."""
        if not self._claim():
            return False
        self._set_nacked(reason, None, timed_out=reason == "timeout")
        return True


class Tranche(HandOver):
    """Messages handed to one worker at once, settled whole on the all-acked path.

    Exactly one of `claim_whole` (the worker acked everything) and `unpack` (anything
    else) wins the tranche's token: the winner of `claim_whole` settles every message;
    after `unpack`, each `Delivery` is claimed alone through ``pending`` as in any
    hand-over. ``pending`` stays empty until then, so the ledger must not read an empty
    ``pending`` as "settled" for a tranche whose token is still there (`settled`).

    Args:
        sink: where settlements go (the tracker).
        subscriber_id: the subscription the batch is for.
        group: the balanced group.
        envelopes: the messages, in index order.
        attempts: each message's attempt number (None: all first attempts).
        number: its place among its worker's hand-overs.
        started: reports the seconds since the worker started it (its ack deadline
            counts from then; ``-inf``: not started yet).
    """

    __slots__ = ("_built", "_lock", "_whole", "attempts", "envelopes", "number")

    def __init__(
        self, sink: Sink | None, subscriber_id: int, group: str | None,
        envelopes: Sequence[Envelope], attempts: list[int] | None = None, *,
        number: int = 0, started: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(sink, subscriber_id, group)
        self.envelopes = envelopes
        self.attempts = attempts
        self.number = number
        self.started = started
        self._whole: dict[int, bool] = {0: True}  # the token: popped once, atomically
        self._built: list[Delivery[Any]] = []
        self._lock = threading.Lock()  # lets a losing `unpack` wait for the builder

    def run_by_worker(self, number: int, started: Callable[[], float]) -> None:
        """It is its worker's hand-over ``number``; ``started`` reports the seconds since
        the worker started it (its ack deadline counts from then)."""
        self.number = number
        self.count_from(started)

    def claim_whole(self) -> bool:
        """Claim every message as settled at once; False when `unpack` came first."""
        return self._whole.pop(0, None) is not None

    def whole(self) -> bool:
        """True while no `Delivery` was built for it (`claim_whole` may still win)."""
        return 0 in self._whole

    def settled(self) -> bool:
        """True when nothing of it is pending any more."""
        return 0 not in self._whole and not self.pending

    def unpack(self) -> list[Delivery[Any]]:
        """The per-message deliveries, built on first call (all pending then).

        Empty when `claim_whole` won. Thread-safe: concurrent callers get the same list.
        """
        with self._lock:
            if self._whole.pop(0, None) is not None:
                attempts: Sequence[int] | repeat[int] = (
                    repeat(1) if self.attempts is None else self.attempts
                )
                built: list[Delivery[Any]] = list(
                    map(Delivery, self.envelopes, repeat(self), count(), attempts)
                )
                self.hold(dict(enumerate(built)))
                self._built = built
            return self._built

    def unsettled(self) -> dict[int, Delivery[Any]]:
        """The deliveries nothing has claimed yet (building them if needed)."""
        self.unpack()
        return self.pending
