"""A delivery read from a Redis consumer group (or a broadcast reader), and its settlement."""

from __future__ import annotations

import threading
from typing import Any, Generic, Protocol, TypeVar

from runtime.errors import SettlementError

__all__ = ["RedisDelivery", "Settler"]

T = TypeVar("T")

_PENDING, _ACKED, _NACKED = "pending", "acked", "nacked"


class Settler(Protocol):
    """Where a delivery's settlement goes: its member's consumer."""

    def settle(self, delivery: RedisDelivery[Any], kind: str, reason: str, error: str | None,
               exception: str | None, traceback: str | None) -> str:
        """Settle now (kind ``a`` ack, ``n`` nack, ``x`` final nack); return the fence's
        verdict: ``ok``; ``taken``/``late``/``gone`` when Redis took it back after its
        deadline; ``closed`` when its member handed it back on close."""

    def defer_ack(self, delivery: RedisDelivery[Any]) -> bool:
        """Queue an ack for the member's next batch settlement; False when it must be
        settled now instead (near its deadline, or nobody batches)."""


class RedisDelivery(Generic[T]):
    """One message handed to one subscriber; settle it once with `ack` or `nack`.

    A delivery of a group is fenced: settling it after Redis gave it to another holder
    (its ack deadline passed, or it was handed back) raises `SettlementError` and changes
    nothing in Redis. Thread-safe.

    Attributes:
        message: the published object (a `Message` for Publisher traffic).
        message_id: the stream entry id.
        topic: the topic's name.
        subscriber_id: the subscription that received it.
        group: the balanced group, or None for a broadcast subscriber.
        key: the ordering key, or None.
        attributes: the message's attributes.
        attempt: this delivery's attempt (1 for the first).
    """

    __slots__ = ("_lock", "_settler", "_state", "_timed_out", "attempt", "attributes",
                 "entry_id", "group", "key", "message", "message_id", "partition",
                 "received", "subscriber_id", "topic")

    def __init__(self, settler: Settler, message: T, message_id: str, topic: str,
                 subscriber_id: int, group: str | None, key: str | None,
                 attributes: dict[str, str], attempt: int, received: float,
                 entry_id: str | None = None, partition: int = 0) -> None:
        self._settler = settler
        self.message = message
        self.message_id = message_id
        # The stream entry it was read from: the message id, or a replay's own entry.
        self.entry_id = message_id if entry_id is None else entry_id
        self.partition = partition  # the partition of the topic it was read from
        self.topic = topic
        self.subscriber_id = subscriber_id
        self.group = group
        self.key = key
        self.attributes = attributes
        self.attempt = attempt
        self.received = received  # the member's clock when it was read
        self._lock = threading.Lock()
        self._state = _PENDING
        self._timed_out = False

    def __repr__(self) -> str:
        return (f"RedisDelivery(message_id={self.message_id!r}, group={self.group!r}, "
                f"attempt={self.attempt}, state={self._state!r})")

    @property
    def state(self) -> str:
        """``"pending"``, ``"acked"`` or ``"nacked"``."""
        return self._state

    @property
    def pending(self) -> bool:
        """True until settled."""
        return self._state == _PENDING

    @property
    def acked(self) -> bool:
        """True once acked."""
        return self._state == _ACKED

    @property
    def nacked(self) -> bool:
        """True once nacked, or taken back by Redis (see `timed_out`)."""
        return self._state == _NACKED

    @property
    def timed_out(self) -> bool:
        """True when its ack deadline passed before it was settled."""
        return self._timed_out

    def ack(self) -> None:
        """Acknowledge: the group is done with this message.

        Blocks for one Redis call unless the member batches it (well before the deadline).

        Raises:
            SettlementError: already settled, or taken back by Redis.
            BackendUnavailableError: Redis did not answer.
        """
        with self._lock:
            self._check()
            if self._settler.defer_ack(self):
                self._state = _ACKED
                return
            self._finish(self._settler.settle(self, "a", "", None, None, None), _ACKED)

    def nack(self, reason: str | None = None) -> None:
        """Refuse: redelivered while attempts remain, else dead-lettered (``nack``).

        ``reason`` is free text kept as the dead letter's ``error``. Blocks for one
        Redis call.

        Raises:
            SettlementError: already settled, or taken back by Redis.
            BackendUnavailableError: Redis did not answer.
        """
        self.fail("n", "nack", reason, None, None)

    def fail(self, kind: str, reason: str, error: str | None, exception: str | None,
             traceback: str | None) -> None:
        """Nack with a category (``nack``, ``error``); kind ``x`` never redelivers.

        Raises:
            SettlementError: as `nack`.
        """
        with self._lock:
            self._check()
            self._finish(self._settler.settle(self, kind, reason, error, exception, traceback),
                         _NACKED)

    def taken_back(self, verdict: str) -> None:
        """Redis refused a deferred ack (``verdict`` from the fence): record it so."""
        with self._lock:
            self._state = _NACKED
            self._timed_out = verdict != "closed"

    def _check(self) -> None:
        if self._state != _PENDING:
            raise SettlementError(self.message_id, "timed out" if self._timed_out else self._state)

    def _finish(self, verdict: str, state: str) -> None:
        if verdict == "ok":
            self._state = state
            return
        self._state = _NACKED
        self._timed_out = verdict != "closed"
        raise SettlementError(self.message_id, f"taken back by Redis ({verdict})")
