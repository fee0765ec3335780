"""One client connection on the server: authenticate, then serve requests in order.

A session owns what its client opened: pull subscriptions and the deliveries handed
out through them. When the connection ends — closed, broken, refused frame — the
subscriptions leave their groups and unsettled deliveries are nacked (``"connection
lost"``), so they are redelivered or dead-lettered as the topic says.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection
from typing import Any

from runtime.broker._auth import authenticate_server
from runtime.broker._protocol import DeliveryFrame, transferable, wire_error
from runtime.broker._service import BrokerService, fail_delivery
from runtime.broker._wire import FrameRefusedError, TypeRegistry, read_frame, write_frame

__all__ = ["Session"]

logger = logging.getLogger(__name__)

# Longest a receive holds the connection; the client repeats it for longer waits.
RECEIVE_SLICE = 1.0
LOST_REASON = "connection lost"


class Session:
    """Serves one connection until it ends (runs in a thread the server owns).

    Args:
        connection: the accepted, not yet authenticated connection.
        service: the server-wide operations.
        authkey: the key the peer must prove.
        registry: the allow-list of frames.
        max_frame_size: longest request accepted; a longer one drops the connection.
        handshake_timeout: bound of the challenge.
    """

    def __init__(
        self, connection: Connection, service: BrokerService, *, authkey: bytes,
        registry: TypeRegistry, max_frame_size: int, handshake_timeout: float,
    ) -> None:
        self.connection = connection
        self._service = service
        self._authkey = authkey
        self._registry = registry
        self._max_frame_size = max_frame_size
        self._handshake_timeout = handshake_timeout
        self.authenticated = False
        self.evicted = False
        self.handshake_deadline = time.monotonic() + handshake_timeout
        self._lock = threading.Lock()  # orders interrupt() against closing the socket
        self._subscriptions: dict[int, Any] = {}
        self._deliveries: dict[int, Any] = {}
        self._tokens = itertools.count(1)
        self._operations: dict[str, Callable[..., Any]] = {
            "subscribe": self._subscribe, "receive": self._receive, "ack": self._ack,
            "nack": self._nack, "fail": self._fail, "unsubscribe": self._unsubscribe,
            "ping": lambda: "pong",
        }
        for name in ("topics", "stats", "publish", "publish_batch", "lease_position",
                     "lease_latest", "lease_fetch", "lease_ack", "lease_heartbeat", "stage",
                     "commit", "abort", "dead_letters", "drain_dead_letters",
                     "replay_dead_letters", "lease_target", "lease_missing", "lease_ack_range"):
            self._operations[name] = getattr(service, name)

    def run(self) -> None:
        """Authenticate, then answer requests until the connection ends."""
        try:
            # Proven peers are never evicted to make room (`BusServer`), and a client
            # counts itself connected before the handshake ends here: mark it at once.
            authenticate_server(self.connection, self._authkey, self._handshake_timeout,
                                on_proven=self._proven)
        except (AuthenticationError, EOFError, OSError) as exc:
            logger.warning("broker: connection refused: %s", exc)
            self._end()
            return
        try:
            self._serve()
        except (EOFError, OSError):
            pass  # closed by the peer, by the server, or an oversized frame
        except FrameRefusedError as exc:
            logger.warning("broker: connection dropped: %s", exc)
        finally:
            self._end()

    def _proven(self) -> None:
        self.authenticated = True

    def overdue(self, now: float) -> bool:
        """True while still unauthenticated past the handshake deadline.

        The challenge bounds its wait for each frame's first bytes; a peer that sends
        part of a frame and goes silent is ended by the server's sweeper through this.
        """
        return not self.authenticated and now > self.handshake_deadline

    def interrupt(self) -> None:
        """Wake the session's thread wherever it blocks, so it ends (from another thread)."""
        with self._lock:
            if self.connection.closed:
                return
            try:
                sock = socket.socket(fileno=os.dup(self.connection.fileno()))
            except OSError:
                return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already disconnected
        finally:
            sock.close()

    def _serve(self) -> None:
        while True:
            request = read_frame(self.connection, self._registry, self._max_frame_size)
            if not (isinstance(request, tuple) and len(request) == 2
                    and isinstance(request[0], str) and isinstance(request[1], tuple)):
                raise FrameRefusedError("frame refused: not a request")
            write_frame(self.connection, self._answer(*request))

    def _answer(self, name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
        operation = self._operations.get(name)
        if operation is None:
            return "error", ValueError(f"unknown broker operation {name!r}")
        try:
            value = operation(*args)
        except Exception as exc:  # the client gets the error; the connection stays up
            return "error", wire_error(exc, self._registry)
        if not transferable(value, self._registry):
            return "error", TypeError(f"the reply of {name!r} cannot cross the broker")
        return "ok", value

    def _subscribe(self, name: str, group: str | None) -> int:
        subscription = self._service_topic(name).subscription(group=group)
        self._subscriptions[subscription.id] = subscription
        return int(subscription.id)

    def _receive(self, subscription_id: int, timeout: float | None) -> DeliveryFrame:
        subscription = self._subscriptions[subscription_id]
        wait = RECEIVE_SLICE if timeout is None else min(max(timeout, 0.0), RECEIVE_SLICE)
        while True:
            receive = subscription.receive_nowait if wait <= 0 else partial(subscription.receive, wait)
            delivery = receive()
            if transferable(delivery.message, self._registry):
                return self._hand_out(delivery)
            fail_delivery(delivery, f"a {type(delivery.message).__qualname__} message "
                                    "cannot cross the broker")

    def _hand_out(self, delivery: Any) -> DeliveryFrame:
        token = next(self._tokens)
        self._deliveries[token] = delivery
        return DeliveryFrame(
            token=token, message=delivery.message, message_id=delivery.message_id,
            topic=delivery.topic, subscriber_id=delivery.subscriber_id, group=delivery.group,
            key=delivery.key, attributes=dict(delivery.attributes or {}), attempt=delivery.attempt,
        )

    def _ack(self, token: int) -> None:
        self._deliveries.pop(token).ack()

    def _nack(self, token: int, reason: str) -> None:
        self._deliveries.pop(token).nack(reason)

    def _fail(self, token: int, error: str) -> None:
        fail_delivery(self._deliveries.pop(token), error)

    def _unsubscribe(self, subscription_id: int) -> None:
        subscription = self._subscriptions.pop(subscription_id, None)
        if subscription is not None:
            subscription.unsubscribe()

    def _service_topic(self, name: str) -> Any:
        return self._service.topic(name)

    def _end(self) -> None:
        with self._lock:
            self.connection.close()
        subscriptions, self._subscriptions = list(self._subscriptions.values()), {}
        deliveries, self._deliveries = list(self._deliveries.values()), {}
        for subscription in subscriptions:
            _quietly(subscription.unsubscribe)
        for delivery in deliveries:
            _quietly(lambda d=delivery: d.nack(LOST_REASON))  # type: ignore[misc]


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except Exception as exc:  # already settled, topic closed: nothing left to do
        logger.debug("broker: cleanup step skipped: %s", exc)
