"""Subscriptions: push handles, and pull subscriptions that receive deliveries on demand."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from actors import Ref
from runtime.core._envelope import Envelope
from runtime.core.settlement._delivery import Delivery, HandOver
from runtime.core.settlement._ledger import Ledger
from runtime.core.settlement._tranche import Tranche
from runtime.core.subscribers._broadcast import hand_over
from runtime.core.subscribers._group_mail import Credit
from runtime.core.subscribers._ring import Ring
from runtime.errors import TopicClosedError, WouldBlock

__all__ = ["PullEndpoint", "PullSubscription", "RingSource", "Source", "Subscription"]

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
        """
        return self._source.receive(timeout)

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[Delivery[T]]:
        """Block for the next delivery, then take every ready one, up to ``max_messages``.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            TopicClosedError: the topic is closed (and nothing is left) or unsubscribed.
            ValueError: ``max_messages`` < 1.
        """
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
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


class PullEndpoint:
    """A pull group member: the group pushes up to ``window`` deliveries into its buffer.

    With ``tranches`` (a lease member, read by the broker's lease log) it is pushed
    whole `Tranche` hand-overs and reads them whole (`receive_tranches`): no
    `Delivery` is built for a message unless something settles it alone.
    """

    handovers: int | None = None
    cost: float | None = None  # a reader's time per message is not measured

    def __init__(self, key: int, subscriber_id: int, group: Ref, topic: str,
                 window: int = 1, *, tranches: bool = False) -> None:
        self.window = window
        self.key = key
        self.subscriber_id = subscriber_id
        self.tranches = tranches
        self._group = group
        self._topic = topic
        self._items: deque[Any] = deque()  # deliveries, or tranches of a lease member
        self._changed = threading.Condition(threading.Lock())
        self._closed = False

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Buffer a batch (called on the group's thread)."""
        with self._changed:
            if self.tranches:
                self._items.append(handover)
            else:
                self._items.extend(deliveries)
            self._changed.notify_all()

    def prefers_whole(self, count: int) -> bool:
        """Never: a pull member takes at most its small window."""
        return False

    def cap(self) -> int:
        """A hand-over may fill the whole window."""
        return self.window

    def receive(self, timeout: float | None) -> Delivery[Any]:
        """Block for the next still-pending delivery; returns credit for each taken."""
        return self.receive_many(1, timeout)[0]

    def receive_many(self, max_messages: int, timeout: float | None) -> list[Delivery[Any]]:
        """Block for at least one pending delivery; take up to ``max_messages`` at once.

        Credit goes back to the group once for the whole batch.
        """
        if self.tranches:
            raise TypeError("a lease member is read with receive_tranches")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                taken = 0
                pending: list[Delivery[Any]] = []
                while self._items and len(pending) < max_messages:
                    delivery = self._items.popleft()
                    taken += 1
                    if delivery.pending:
                        pending.append(delivery)
                if taken:
                    self._group.tell(Credit(self.key, taken, 0))
                if pending:
                    return pending
                self._wait(deadline, timeout)

    def receive_tranches(self, max_messages: int, timeout: float | None) -> list[Tranche]:
        """Block for a tranche; take whole ones until ``max_messages`` messages are
        taken or none is left (credit goes back once for them all)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not self._items:
                self._wait(deadline, timeout)
            taken: list[Tranche] = []
            count = 0
            items = self._items
            while items and count < max_messages:
                tranche = items.popleft()
                taken.append(tranche)
                count += len(tranche.envelopes)
            self._group.tell(Credit(self.key, count, 0))
            return taken

    def give_back(self, tranches: list[Tranche]) -> None:
        """Put ``tranches`` back at the front of the buffer, in order (their credit was
        returned when they were taken: it is taken again)."""
        with self._changed:
            self._items.extendleft(reversed(tranches))
            self._group.tell(Credit(self.key, -sum(len(t.envelopes) for t in tranches), 0))
            self._changed.notify_all()

    def _wait(self, deadline: float | None, timeout: float | None) -> None:
        """Wait (lock held) for a push until ``deadline``; a timeout or a close raises.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            TopicClosedError: closed and nothing is buffered.
        """
        if self._closed:
            raise TopicClosedError(self._topic)
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(f"no message on topic {self._topic!r} within {timeout}s")
        self._changed.wait(remaining)
        if self._closed and not self._items:
            raise TopicClosedError(self._topic)

    def close(self, *, claim: bool = True) -> list[tuple[Envelope, int]]:
        """Stop; return the buffered deliveries it claimed back (to requeue).

        With ``claim=False`` (the topic is closing) nothing is claimed: the tracker's
        sweep settles the buffered deliveries as ``closed`` with everything else.
        """
        with self._changed:
            self._closed = True
            items, self._items = list(self._items), deque()
            self._changed.notify_all()
        if not claim:
            return []
        if self.tranches:
            items = [d for tranche in items for d in tranche.unpack()]
        return [(d._envelope, d._attempt) for d in items if d._claim()]
