"""A pull subscription on a served bus, and the deliveries it hands out.

Each subscription has its own connection, so a blocking receive holds no other
caller. A receive waits on the server in slices of at most a second; settling a
delivery from another thread goes out at once meanwhile (the connection carries
several calls at a time, and the server serves receives in a thread of their own).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from runtime.broker._client import Channel
from runtime.broker._protocol import DeliveryFrame
from runtime.broker._session import RECEIVE_SLICE
from runtime.core._settings import check_timeout
from runtime.errors import SettlementError

__all__ = ["RemoteDelivery", "RemotePullSubscription"]

_REPLY_MARGIN = 30.0


class RemoteDelivery:
    """A delivery received through the broker: `Delivery`'s reading and settling API.

    ``ack()``/``nack()`` block for the server's answer, and the flags change only once
    it came: settling twice raises `SettlementError`, and so does settling a delivery the
    server already settled (its ack deadline passed: it then reads ``nacked`` and
    ``timed_out``; the topic closed: ``nacked``). A settlement whose connection broke
    raises `ConnectionError` and leaves the delivery ``pending`` (the server nacks what
    a lost connection held, so it is redelivered or dead-lettered there).
    """

    def __init__(self, frame: DeliveryFrame, channel: Channel) -> None:
        self._frame = frame
        self._channel = channel
        self._lock = threading.Lock()  # held across a settlement's round trip
        self._state = "pending"
        self._timed_out = False

    message = property(lambda self: self._frame.message, doc="The message as published.")
    message_id = property(lambda self: self._frame.message_id, doc="The topic's id of it.")
    topic = property(lambda self: self._frame.topic, doc="The topic's name.")
    subscriber_id = property(lambda self: self._frame.subscriber_id, doc="The subscription id.")
    group = property(lambda self: self._frame.group, doc="The balanced group, or None.")
    key = property(lambda self: self._frame.key, doc="The ordering key, or None.")
    attributes = property(lambda self: self._frame.attributes, doc="The string attributes.")
    attempt = property(lambda self: self._frame.attempt, doc="1 on the first delivery.")

    @property
    def state(self) -> str:
        """``"pending"``, ``"acked"`` or ``"nacked"``."""
        return self._state

    pending = property(lambda self: self._state == "pending", doc="Not settled yet.")
    acked = property(lambda self: self._state == "acked", doc="Acked.")
    nacked = property(lambda self: self._state == "nacked", doc="Nacked.")
    timed_out = property(lambda self: self._timed_out,
                         doc="The server's ack deadline settled it (a settlement then failed).")

    def ack(self) -> None:
        """Acknowledge: the message is done for this destination."""
        self._settle("acked", "ack")

    def nack(self, reason: str = "nack") -> None:
        """Refuse it; ``reason`` is free text (category ``"nack"``)."""
        self._settle("nacked", "nack", reason)

    def _fail_if_pending(self, reason: str, error: str | None) -> None:
        """Settle like a handler that raised (category ``"error"``), unless settled."""
        if self._state == "pending":
            self._settle("nacked", "fail", error or reason)

    def _settle(self, state: str, operation: str, *args: Any) -> None:
        with self._lock:
            if self._state != "pending":
                raise SettlementError(self.message_id, "timed out" if self._timed_out else self._state)
            try:
                self._channel.call(operation, self._frame.token, *args)
            except SettlementError as exc:  # the server settled it first: never ours
                settled_as = str(exc.args[1]) if len(exc.args) > 1 else ""
                self._state = "nacked"
                self._timed_out = settled_as == "timed out"
                raise SettlementError(self.message_id, settled_as or "settled by the server") from None
            self._state = state

    def __repr__(self) -> str:
        return f"<RemoteDelivery {self.message_id} attempt={self.attempt} {self._state}>"


class RemotePullSubscription:
    """``topic.subscription(group=...)`` on a served bus (one connection of its own)."""

    def __init__(self, channel: Channel, topic: str, group: str | None) -> None:
        self._channel = channel
        self.topic = topic
        self.group = group
        # The server hands out only what this side's allow-list decodes; the rest is
        # dead-lettered there and reported by `receive` (`NotTransferableError`).
        self.id: int = channel.call("subscribe", topic, group, channel.registry.allowed)

    def receive(self, timeout: float | None = None) -> RemoteDelivery:
        """Block for the next delivery.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            NotTransferableError: the next message holds a type that cannot cross (it
                was dead-lettered on the server, reason ``error``); the next call goes on.
            ConnectionError: the broker went away.
        """
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            wait = RECEIVE_SLICE if remaining is None else min(remaining, RECEIVE_SLICE)
            try:
                frame = self._channel.call("receive", self.id, wait, timeout=wait + _REPLY_MARGIN)
            except TimeoutError:
                if remaining is not None and remaining <= RECEIVE_SLICE:
                    # The server timed out its last slice only: say what the caller waited.
                    raise TimeoutError(
                        f"no message on topic {self.topic!r} within {timeout}s"
                    ) from None
                continue
            return RemoteDelivery(frame, self._channel)

    def receive_nowait(self) -> RemoteDelivery:
        """The next delivery if one is waiting; else raises `WouldBlock`."""
        frame = self._channel.call("receive", self.id, 0.0)
        return RemoteDelivery(frame, self._channel)

    def unsubscribe(self) -> None:
        """Leave the group (or stop reading the ring) and close the connection."""
        if not self._channel.closed:
            try:
                self._channel.call("unsubscribe", self.id)
            finally:
                self._channel.close()

    def __iter__(self) -> Iterator[RemoteDelivery]:
        while True:
            yield self.receive()

    def __repr__(self) -> str:
        return f"<RemotePullSubscription {self.id} topic={self.topic!r} group={self.group!r}>"
