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
from runtime.broker._protocol import DeliveryFrame, untransferable, wire_error
from runtime.broker._service import BrokerService
from runtime.broker._wire import (
    FrameRefusedError,
    MalformedFrameError,
    NotTransferableError,
    TypeRegistry,
    decode,
    encode,
)
from runtime.core.settlement._claims import fail_delivery
from runtime.errors import SettlementError

__all__ = ["Session"]

logger = logging.getLogger(__name__)

# Longest a receive holds the connection; the client repeats it for longer waits.
RECEIVE_SLICE = 1.0
LOST_REASON = "connection lost"
# Handed-out deliveries the server settled itself (deadline, close) are forgotten once
# the books pass this size, so a consumer that never acks cannot grow them unbounded.
PRUNE_AT = 1024


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
        self.busy = False  # serving a request; never evicted then
        self.handshake_deadline = time.monotonic() + handshake_timeout
        self.last_active = time.monotonic()
        self._prune_at = PRUNE_AT
        self._lock = threading.Lock()  # orders interrupt() against closing the socket
        self._subscriptions: dict[int, Any] = {}
        self._readers: dict[int, TypeRegistry] = {}  # per subscription: what its client decodes
        self._deliveries: dict[int, Any] = {}
        self._tokens = itertools.count(1)
        self._operations: dict[str, Callable[..., Any]] = {
            "subscribe": self._subscribe, "receive": self._receive, "ack": self._ack,
            "nack": self._nack, "fail": self._fail, "unsubscribe": self._unsubscribe,
            "ping": lambda: "pong", "limits": lambda: {"max_frame_size": self._max_frame_size},
        }
        for name in ("topics", "stats", "publish", "publish_batch", "lease_position",
                     "lease_latest", "lease_ack", "lease_heartbeat", "stage",
                     "commit", "abort", "dead_letters", "drain_dead_letters",
                     "replay_dead_letters", "held_by", "lease_target", "lease_missing",
                     "lease_ack_range", "lease_fetch_arrow"):
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
        except MalformedFrameError as exc:
            logger.warning("broker: connection dropped: %s", exc)
        finally:
            self._end()

    def _proven(self) -> None:
        self.authenticated = True
        self.last_active = time.monotonic()

    def idle_for(self, now: float) -> float:
        """Seconds since the session last served a request (0 while it serves one)."""
        return 0.0 if self.busy or not self.authenticated else max(now - self.last_active, 0.0)

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
            data = self.connection.recv_bytes(self._max_frame_size)
            self.busy = True
            try:
                self.connection.send_bytes(self._reply_to(data))
            finally:
                self.last_active = time.monotonic()
                self.busy = False

    def _reply_to(self, data: bytes) -> bytes:
        """The encoded reply to one request frame; a refused frame fails alone."""
        try:
            request = decode(data, self._registry)
        except MalformedFrameError:
            raise
        except FrameRefusedError as exc:  # read whole, so the stream is still in step
            logger.info("broker: request refused: %s", exc)
            return encode(("error", NotTransferableError("", str(exc))))
        if not (isinstance(request, tuple) and len(request) == 2
                and isinstance(request[0], str) and isinstance(request[1], tuple)):
            raise MalformedFrameError("frame refused: not a request")
        name, args = request
        try:
            return encode(self._answer(name, args), self._max_frame_size, name)
        except NotTransferableError as exc:
            return encode(("error", exc))

    def _answer(self, name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
        operation = self._operations.get(name)
        if operation is None:
            return "error", ValueError(f"unknown broker operation {name!r}")
        try:
            value = operation(*args)
        except Exception as exc:  # the client gets the error; the connection stays up
            return "error", wire_error(exc, self._registry)
        refused = untransferable(value, self._registry)
        if refused is not None:
            return "error", NotTransferableError(name, f"its reply holds a {refused}")
        return "ok", value

    def _subscribe(self, name: str, group: str | None, reads: list[str] | None = None) -> int:
        """Join ``group``; ``reads``: the user classes the client can decode (None: all)."""
        if reads is not None and not (isinstance(reads, list) and all(isinstance(n, str) for n in reads)):
            raise TypeError("subscribe: reads must be a list of qualified class names")
        subscription = self._service_topic(name).subscription(group=group)
        self._subscriptions[subscription.id] = subscription
        if reads is not None:
            self._readers[subscription.id] = self._registry.narrowed(reads)
        return int(subscription.id)

    def _receive(self, subscription_id: int, timeout: float | None) -> DeliveryFrame:
        subscription = self._subscriptions[subscription_id]
        wait = RECEIVE_SLICE if timeout is None else min(max(timeout, 0.0), RECEIVE_SLICE)
        while True:
            receive = subscription.receive_nowait if wait <= 0 else partial(subscription.receive, wait)
            delivery = receive()
            refused = untransferable(delivery.message, self._readers.get(subscription_id, self._registry))
            if refused is None:
                return self._hand_out(delivery)
            # Dead-letter it (nothing lost, replayable once allowed) and say so to the
            # puller at once rather than leave it waiting blind for the next one.
            error = f"its message holds a {refused}, which cannot cross the broker"
            fail_delivery(delivery, error)
            raise NotTransferableError(
                "receive", f"message {delivery.message_id}: {error} "
                "(dead-lettered on the server, reason 'error'; allow= the class to let it cross)")

    def _hand_out(self, delivery: Any) -> DeliveryFrame:
        token = next(self._tokens)
        self._deliveries[token] = delivery
        if len(self._deliveries) >= self._prune_at:
            self._prune()
        return DeliveryFrame(
            token=token, message=delivery.message, message_id=delivery.message_id,
            topic=delivery.topic, subscriber_id=delivery.subscriber_id, group=delivery.group,
            key=delivery.key, attributes=dict(delivery.attributes or {}), attempt=delivery.attempt,
        )

    def _prune(self) -> None:
        """Forget deliveries the server settled (deadline passed, topic closed).

        The next prune waits until the books doubled past what stayed, so handing out
        costs O(1) amortised however many deliveries the consumer keeps unsettled.
        """
        self._deliveries = {t: d for t, d in self._deliveries.items() if d.pending}
        self._prune_at = max(PRUNE_AT, 2 * len(self._deliveries))

    def _settling(self, token: int) -> Any:
        delivery = self._deliveries.pop(token, None)
        if delivery is None:
            raise SettlementError(f"token {token}", "settled by the server: ack deadline passed")
        return delivery

    def _ack(self, token: int) -> None:
        self._settling(token).ack()

    def _nack(self, token: int, reason: str) -> None:
        self._settling(token).nack(reason)

    def _fail(self, token: int, error: str) -> None:
        fail_delivery(self._settling(token), error)

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
