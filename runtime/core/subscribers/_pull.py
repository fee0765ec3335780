"""A pull group member's buffer: what the group pushed, until ``receive`` takes it."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from actors import Ref
from runtime.core._envelope import Envelope
from runtime.core.settlement._delivery import Delivery, HandOver, Sink, Tranche
from runtime.core.subscribers._group_mail import Credit
from runtime.errors import TopicClosedError

__all__ = ["PullEndpoint"]


class PullEndpoint:
    """A pull group member: the group pushes up to ``window`` deliveries into its buffer.

    With ``tranches`` (a lease member, read by the broker's lease log) it is pushed
    whole `Tranche` hand-overs and reads them whole (`receive_tranches`): no
    `Delivery` is built for a message unless something settles it alone.
    """

    handovers: int | None = None
    cost: float | None = None  # never measured: it takes at most its small window

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

    def hand_over(
        self, sink: Sink, group: str, envelopes: Sequence[Envelope], attempts: list[int] | None,
    ) -> tuple[HandOver, list[Delivery[Any]]]:
        """A hand-over of ``envelopes`` (its deadline runs from the hand-over): a lease
        member's is one `Tranche` and no deliveries."""
        if self.tranches:
            return Tranche(sink, self.subscriber_id, group, envelopes, attempts), []
        return HandOver.of(sink, self.subscriber_id, group, envelopes, attempts)

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Buffer a batch (called on the group's thread)."""
        with self._changed:
            if self.tranches:
                self._items.append(handover)
            else:
                self._items.extend(deliveries)
            self._changed.notify_all()

    def cap(self) -> int:
        """A hand-over may fill the whole window."""
        return self.window

    def left(self, unsettled: int) -> int:
        """All of them: a reader's pace is not measured."""
        return unsettled

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

    def unread(self) -> int:
        """Messages pushed here and not taken by a receive yet."""
        with self._changed:
            if self.tranches:
                return sum(len(tranche.envelopes) for tranche in self._items)
            return len(self._items)

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
        return [(d._envelope, d._attempt) for d in items if d._withdraw()]
