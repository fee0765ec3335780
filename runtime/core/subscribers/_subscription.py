"""Subscriptions: push handles, and pull subscriptions that receive deliveries on demand."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from actors import Ref
from runtime.core._settings import check_timeout
from runtime.core.settlement._delivery import Delivery, HandOver, Tranche
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._broadcast import hand_over
from runtime.core.subscribers._pull import PullEndpoint
from runtime.core.subscribers._ring import Ring
from runtime.errors import TopicClosedError, WouldBlock

__all__ = ["PullSubscription", "RingSource", "Source", "Subscription"]

T = TypeVar("T")


class Subscription:
    """A push subscription: a handler attached to a topic (broadcast or a group member).

    Attributes:
        id: unique per topic, from 1, never reused.
        group: the balanced group's name, or None for a broadcast subscriber.
    """

    def __init__(self, id: int, group: str | None, detach: Callable[[], None]) -> None:
        self.id = id
        self.group = group
        self._detach = detach
        self._lock = threading.Lock()
        self._active = True

    def __repr__(self) -> str:
        return f"Subscription(id={self.id}, group={self.group!r}, active={self._active})"

    @property
    def active(self) -> bool:
        """False once unsubscribed."""
        return self._active

    def unsubscribe(self) -> None:
        """Stop receiving; idempotent. Deliveries already handed over can still be settled.

        Entries a broadcast subscriber had not read settle as ``"unsubscribed"``.
        """
        with self._lock:
            if not self._active:
                return
            self._active = False
        self._detach()


class Source(Protocol):
    """Where a pull subscription's deliveries come from."""

    def receive(self, timeout: float | None) -> Delivery[Any]:
        """Block for the next delivery (TimeoutError, TopicClosedError)."""

    def receive_many(self, max_messages: int, timeout: float | None) -> list[Delivery[Any]]:
        """Block for the first delivery, then take up to ``max_messages`` ready ones."""


class PullSubscription(Subscription, Generic[T]):
    """A subscription you read from: ``receive()`` or iterate; settle each delivery.

    With ``group=None`` it is a broadcast subscriber reading the ring directly; with a
    group it is a member with a prefetch (one unless asked otherwise).
    """

    def __init__(
        self, id: int, group: str | None, source: Source, detach: Callable[[], None],
        renew: Callable[..., None] | None = None,
    ) -> None:
        super().__init__(id, group, detach)
        self._source = source
        self._renew = renew

    def extend(self, deliveries: Iterable[Delivery[T]]) -> int:
        """Restart the ack deadline of the still-pending ``deliveries``, from now (a reader
        still working on them says so, like Pub/Sub's ``modify_ack_deadline``).

        Returns how many were still pending (the others settled or expired already).
        Never blocks on the topic; without an ``ack_timeout`` it only counts.
        """
        renewed: set[int] = set()
        pending = 0
        for delivery in deliveries:
            if not delivery.pending:
                continue
            pending += 1
            handover = delivery._handover
            if self._renew is not None and id(handover) not in renewed:
                renewed.add(id(handover))
                self._renew(handover, force=True)
        return pending

    def __iter__(self) -> Iterator[Delivery[T]]:
        """Yield deliveries until the topic closes or this unsubscribes."""
        while True:
            try:
                yield self.receive()
            except TopicClosedError:
                return

    def receive(self, timeout: float | None = None) -> Delivery[T]:
        """Block for the next delivery.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            TopicClosedError: the topic is closed (and nothing is left) or unsubscribed.
            ValueError: ``timeout`` is NaN or infinite.
        """
        check_timeout("timeout", timeout)
        return self._source.receive(timeout)

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[Delivery[T]]:
        """Block for the next delivery, then take every ready one, up to ``max_messages``.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            TopicClosedError: the topic is closed (and nothing is left) or unsubscribed.
            ValueError: ``max_messages`` < 1, or ``timeout`` is NaN or infinite.
        """
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        check_timeout("timeout", timeout)
        return self._source.receive_many(max_messages, timeout)

    def receive_tranches(self, max_messages: int, timeout: float | None = None) -> list[Tranche]:
        """A lease member's read (`Topic._lease_member`): whole hand-overs, each one
        `Tranche` of envelopes with no per-message object, at least ``max_messages``
        messages in all unless fewer are ready (the last may go past it).

        Raises:
            TimeoutError, TopicClosedError: as `receive_many`.
            TypeError: this is not a lease member.
        """
        if not isinstance(self._source, PullEndpoint) or not self._source.tranches:
            raise TypeError("receive_tranches reads a lease member only")
        return self._source.receive_tranches(max_messages, timeout)

    def _unread(self) -> int:
        """A group member's messages handed over and not received yet (0 for a
        broadcast reader, which takes each entry as it receives)."""
        source = self._source
        return source.unread() if isinstance(source, PullEndpoint) else 0

    @property
    def tranches(self) -> bool:
        """True for a lease member (read with `receive_tranches`)."""
        return bool(getattr(self._source, "tranches", False))

    def give_back(self, tranches: list[Tranche]) -> None:
        """A lease member's reader returns ``tranches`` unread: they go back to the front
        of its buffer, and leaving the group gives their pending messages back to it at
        the same attempt."""
        if not isinstance(self._source, PullEndpoint) or not self._source.tranches:
            raise TypeError("give_back is for a lease member only")
        self._source.give_back(tranches)

    def renew_handovers(self, handovers: Iterable[HandOver]) -> None:
        """Restart the ack deadline of every delivery ``handovers`` still hold, from now."""
        if self._renew is not None:
            for handover in handovers:
                self._renew(handover, force=True)

    def receive_nowait(self) -> Delivery[T]:
        """Return the next delivery if one is ready.

        Raises:
            WouldBlock: none is ready.
            TopicClosedError: the topic is closed (and nothing is left) or unsubscribed.
        """
        try:
            return self._source.receive(0.0)
        except TimeoutError as exc:
            raise WouldBlock("no delivery ready") from exc


class RingSource:
    """A pull broadcast subscriber's reads: one ring entry per receive."""

    def __init__(self, ring: Ring, subscriber_id: int, ledger: Ledger, tracker: Ref) -> None:
        self._ring = ring
        self._subscriber_id = subscriber_id
        self._ledger = ledger
        self._tracker = tracker

    def receive_many(self, max_messages: int, timeout: float | None) -> list[Delivery[Any]]:
        """One entry at a time: a broadcast reader's cursor moves per receive."""
        return [self.receive(timeout)]

    def receive(self, timeout: float | None) -> Delivery[Any]:
        """Take the next entry and hand it over (its ack deadline starts now)."""
        envelope, attempt = self._ring.read_one(self._subscriber_id, timeout)
        batch = hand_over([envelope], self._subscriber_id, self._ledger, self._tracker, [attempt])
        if batch is None:
            raise TopicClosedError(self._ring.topic)
        return batch[1][0]
