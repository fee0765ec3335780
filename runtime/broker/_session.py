"""One client connection on the server: authenticate, then serve its calls.

A session owns what its client opened: pull subscriptions, the deliveries handed out
through them, and the dead letters a drain sent and the client has not confirmed yet.
When the connection ends — closed, broken, refused frame — the subscriptions leave
their groups and unsettled deliveries are nacked (``"connection lost"``), so they are
redelivered or dead-lettered as the topic says.

Every frame carries its call id, and replies carry the id of their call, so calls need
not be answered in order: a blocking ``receive`` is served by the session's receiver
thread while the connection's thread goes on answering the other calls at once
(settlements from another client thread are never held behind a receive).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection
from typing import Any

from runtime.broker._auth import authenticate_server
from runtime.broker._client import os_reason, shut_down
from runtime.broker._protocol import (
    DeliveryFrame,
    plain_letter,
    plain_message,
    untransferable,
    wire_error,
)
from runtime.broker._service import BrokerService
from runtime.broker._throttle import HandshakeThrottle
from runtime.broker._wire import (
    FrameRefusedError,
    MalformedFrameError,
    NotTransferableError,
    TypeRegistry,
    decode,
    framed,
    unframed,
)
from runtime.core._settings import check_timeout
from runtime.core.settlement._claims import fail_delivery
from runtime.errors import SettlementError

__all__ = ["Session"]

logger = logging.getLogger(__name__)

# Longest a receive holds the receiver thread; the client repeats it for longer waits.
RECEIVE_SLICE = 1.0
LOST_REASON = "connection lost"
# Handed-out deliveries the server settled itself (deadline, close) are forgotten once
# the books pass this size, so a consumer that never acks cannot grow them unbounded.
PRUNE_AT = 1024
_STOP: Any = object()  # tells the receiver thread to end
_RECEIVER_JOIN = 5.0


class Session:
    """Serves one connection until it ends (runs in a thread the server owns).

    Args:
        connection: the accepted, not yet authenticated connection.
        service: the server-wide operations.
        authkey: the key the peer must prove.
        registry: the allow-list of frames.
        max_frame_size: longest request accepted; a longer one drops the connection.
        handshake_timeout: bound of the challenge (the wait for its turn included).
        peer: the peer's ``host:port``, as logs name it.
        host: the peer's host, whose turn the handshake waits for in ``throttle``.
        throttle: when each host may run its next handshake.
    """

    def __init__(
        self, connection: Connection, service: BrokerService, *, authkey: bytes,
        registry: TypeRegistry, max_frame_size: int, handshake_timeout: float,
        peer: str = "?", host: str = "?", throttle: HandshakeThrottle | None = None,
    ) -> None:
        self.connection = connection
        self._service = service
        self._authkey = authkey
        self._registry = registry
        self._max_frame_size = max_frame_size
        self._handshake_timeout = handshake_timeout
        self.peer = peer
        self._host = host
        self._throttle = throttle if throttle is not None else HandshakeThrottle()
        self.authenticated = False
        self.evicted = False
        self.handshake_deadline = time.monotonic() + handshake_timeout
        self.last_active = time.monotonic()
        self._prune_at = PRUNE_AT
        self._lock = threading.Lock()  # the books below, and interrupt() against closing
        self._sending = threading.Lock()  # whole reply frames on the socket
        self._serving = 0  # calls being answered; never evicted then
        self._interrupted = False
        self._ended = False
        self._subscriptions: dict[int, Any] = {}
        self._readers: dict[int, TypeRegistry] = {}  # per subscription: what its client decodes
        self._deliveries: dict[int, Any] = {}
        self._drain: tuple[int, str, list[Any]] | None = None  # sent, not confirmed yet
        self._tokens = itertools.count(1)
        self._receives: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._receiver: threading.Thread | None = None
        self._operations: dict[str, Callable[..., Any]] = {
            "subscribe": self._subscribe, "receive": self._receive, "ack": self._ack,
            "nack": self._nack, "fail": self._fail, "unsubscribe": self._unsubscribe,
            "drain_dead_letters": self._drain_dead_letters, "confirm_drain": self._confirm_drain,
            "ping": lambda: "pong", "limits": lambda: {"max_frame_size": self._max_frame_size},
        }
        for name in ("topics", "stats", "publish", "publish_batch", "lease_position",
                     "lease_latest", "lease_ack", "lease_heartbeat", "stage",
                     "commit", "abort", "dead_letters", "replay_dead_letters", "held_by",
                     "lease_target", "lease_missing", "lease_ack_range", "lease_fetch_arrow"):
            self._operations[name] = getattr(service, name)

    @property
    def busy(self) -> bool:
        """Serving a call (a receive included): never evicted then."""
        return self._serving > 0

    def run(self) -> None:
        """Authenticate, then answer requests until the connection ends."""
        if not self._authenticate():
            self._end()
            return
        try:
            self._serve()
        except (EOFError, OSError):
            pass  # closed by the peer, by the server, or an oversized frame
        except MalformedFrameError as exc:
            logger.warning("broker: dropped the connection from %s: %s", self.peer, exc)
        finally:
            self._end()

    def _authenticate(self) -> bool:
        """Wait for the host's turn, then run the challenge; True once the peer proved its key."""
        deadline = self.handshake_deadline
        if not self._throttle.wait_turn(self._host, deadline, lambda: self._interrupted):
            if not self._interrupted:
                logger.warning("broker: refused %s: its host is slowed down after wrong keys "
                               "and its next turn comes after the handshake timeout", self.peer)
            return False
        try:
            # Proven peers are never evicted to make room (`BusServer`), and a client
            # counts itself connected before the handshake ends here: mark it at once.
            authenticate_server(self.connection, self._authkey,
                                max(deadline - time.monotonic(), 0.0), on_proven=self._proven)
        except AuthenticationError:
            self._throttle.failed(self._host)
            logger.warning("broker: refused %s: wrong key (its next handshake waits %.2fs)",
                           self.peer, self._throttle.delay(self._host))
            return False
        except TimeoutError:
            logger.warning("broker: refused %s: no answer to the key challenge within %ss",
                           self.peer, self._handshake_timeout)
            return False
        except (EOFError, OSError) as exc:
            if not self._interrupted:
                logger.warning("broker: refused %s: the connection ended during the handshake (%s)",
                               self.peer, os_reason(exc) if str(exc) else "closed by the peer")
            return False
        return True

    def _proven(self) -> None:
        self.authenticated = True
        self.last_active = time.monotonic()
        self._throttle.succeeded(self._host)

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
            self._interrupted = True
        self._throttle.wake()  # waiting for its handshake's turn
        self._shut_down()

    def _shut_down(self) -> None:
        """Shut the socket down both ways: whoever blocks on it wakes (it stays open)."""
        with self._lock:  # not while the receiver closes it
            if not self.connection.closed:
                shut_down(self.connection)

    def _serve(self) -> None:
        while True:
            call_id, body = unframed(self.connection.recv_bytes(self._max_frame_size))
            with self._lock:
                self._serving += 1
            try:
                name, args = self._request(body)
            except MalformedFrameError:
                raise
            except FrameRefusedError as exc:  # read whole, so the stream is still in step
                logger.info("broker: request from %s refused: %s", self.peer, exc)
                self._finish(call_id, ("error", NotTransferableError("", str(exc))), "")
                continue
            if name == "receive":
                self._start_receiver()
                self._receives.put((call_id, args))
            else:
                self._finish(call_id, self._answer(name, args), name)

    def _request(self, body: bytes) -> tuple[str, tuple[Any, ...]]:
        """``(operation, args)`` of a request's pickle.

        Raises:
            FrameRefusedError: a refused pickle (answered; the connection goes on).
            MalformedFrameError: not a pickle, or not a request (the peer is dropped).
        """
        request = decode(body, self._registry)
        if not (isinstance(request, tuple) and len(request) == 2
                and isinstance(request[0], str) and isinstance(request[1], tuple)):
            raise MalformedFrameError("frame refused: not a request")
        return request

    def _finish(self, call_id: int, reply: tuple[str, Any], name: str) -> None:
        """Send the reply of a call being served, which then no longer is."""
        try:
            try:
                frame = framed(call_id, reply, self._max_frame_size, name)
            except NotTransferableError as exc:
                frame = framed(call_id, ("error", exc))
            with self._sending:
                self.connection.send_bytes(frame)
        finally:
            with self._lock:
                self._serving -= 1
                self.last_active = time.monotonic()

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

    def _start_receiver(self) -> None:
        if self._receiver is None:
            self._receiver = threading.Thread(
                target=self._receive_loop, name=f"{threading.current_thread().name}-receive")
            self._receiver.start()

    def _receive_loop(self) -> None:
        """Answer receives in order, apart from the connection's thread."""
        while True:
            item = self._receives.get()
            if item is _STOP:
                return
            call_id, args = item
            try:
                self._finish(call_id, self._answer("receive", args), "receive")
            except (EOFError, OSError):
                pass  # the connection ended: its thread ends the session

    def _subscribe(self, name: str, group: str | None, reads: list[str] | None = None) -> int:
        """Join ``group``; ``reads``: the user classes the client can decode (None: all)."""
        if reads is not None and not (isinstance(reads, list) and all(isinstance(n, str) for n in reads)):
            raise TypeError("subscribe: reads must be a list of qualified class names")
        subscription = self._service.topic(name).subscription(group=group)
        with self._lock:
            self._subscriptions[subscription.id] = subscription
            if reads is not None:
                self._readers[subscription.id] = self._registry.narrowed(reads)
        return int(subscription.id)

    def _receive(self, subscription_id: int, timeout: float | None) -> DeliveryFrame:
        check_timeout("timeout", timeout)
        with self._lock:
            subscription = self._subscriptions[subscription_id]
            reader = self._readers.get(subscription_id, self._registry)
        wait = RECEIVE_SLICE if timeout is None else min(max(timeout, 0.0), RECEIVE_SLICE)
        receive = subscription.receive_nowait if wait <= 0 else partial(subscription.receive, wait)
        delivery = receive()
        message = plain_message(delivery.message)
        refused = untransferable(message, reader)
        if refused is None:
            return self._hand_out(delivery, message)
        # Dead-letter it (nothing lost, replayable once allowed) and say so to the
        # puller at once rather than leave it waiting blind for the next one.
        error = f"its message holds a {refused}, which cannot cross the broker"
        fail_delivery(delivery, error)
        raise NotTransferableError(
            "receive", f"message {delivery.message_id}: {error} "
            "(dead-lettered on the server, reason 'error'; allow= the class to let it cross)")

    def _hand_out(self, delivery: Any, message: Any) -> DeliveryFrame:
        with self._lock:
            if self._ended:  # the session ended while this receive waited: nothing holds it
                delivery.nack(LOST_REASON)
                raise ConnectionError("the connection ended")
            token = next(self._tokens)
            self._deliveries[token] = delivery
            if len(self._deliveries) >= self._prune_at:
                self._prune()
        return DeliveryFrame(
            token=token, message=message, message_id=delivery.message_id,
            topic=delivery.topic, subscriber_id=delivery.subscriber_id, group=delivery.group,
            key=delivery.key, attributes=dict(delivery.attributes or {}), attempt=delivery.attempt,
        )

    def _prune(self) -> None:
        """Forget deliveries the server settled (deadline passed, topic closed); lock held.

        The next prune waits until the books doubled past what stayed, so handing out
        costs O(1) amortised however many deliveries the consumer keeps unsettled.
        """
        self._deliveries = {t: d for t, d in self._deliveries.items() if d.pending}
        self._prune_at = max(PRUNE_AT, 2 * len(self._deliveries))

    def _settling(self, token: int) -> Any:
        with self._lock:
            delivery = self._deliveries.pop(token, None)
        if delivery is None:
            raise SettlementError(f"token {token}", "settled by the server")
        return delivery

    def _ack(self, token: int) -> None:
        self._settling(token).ack()

    def _nack(self, token: int, reason: str) -> None:
        self._settling(token).nack(reason)

    def _fail(self, token: int, error: str) -> None:
        fail_delivery(self._settling(token), error)

    def _unsubscribe(self, subscription_id: int) -> None:
        with self._lock:
            subscription = self._subscriptions.pop(subscription_id, None)
            self._readers.pop(subscription_id, None)
        if subscription is not None:
            subscription.unsubscribe()

    def _drain_dead_letters(self, name: str) -> tuple[int, list[Any]]:
        """The first half of a drain: topic ``name``'s dead letters, removing none.

        Returns a ticket and the letters; `confirm_drain` with the ticket removes exactly
        those, once the client holds them. A drain the client never confirms (the reply
        was lost, refused, or the connection ended) leaves them all on the server.
        """
        letters = self._service.held_dead_letters(name)
        with self._lock:
            ticket = next(self._tokens)
            self._drain = (ticket, name, letters)
        return ticket, [plain_letter(letter) for letter in letters]

    def _confirm_drain(self, ticket: int) -> int:
        """Remove the letters the drain of ``ticket`` sent; returns how many were still there.

        Raises:
            LookupError: no drain of that ticket is waiting on this connection.
        """
        with self._lock:
            drain, self._drain = self._drain, None
        if drain is None or drain[0] != ticket:
            raise LookupError(f"no drain {ticket} to confirm on this connection")
        _, name, letters = drain
        return self._service.remove_dead_letters(name, letters)

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            subscriptions, self._subscriptions = list(self._subscriptions.values()), {}
        for subscription in subscriptions:
            _quietly(subscription.unsubscribe)  # a receive waiting on one wakes
        if self._receiver is not None:
            # A reply the receiver is sending fails at once; the socket is closed only
            # once it ended, so it never writes to a descriptor reused meanwhile.
            self._shut_down()
            self._receives.put(_STOP)
            self._receiver.join(_RECEIVER_JOIN)
        with self._lock:
            self.connection.close()
            deliveries, self._deliveries = list(self._deliveries.values()), {}
        for delivery in deliveries:
            _quietly(lambda d=delivery: d.nack(LOST_REASON))  # type: ignore[misc]


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except Exception as exc:  # already settled, topic closed: nothing left to do
        logger.debug("broker: cleanup step skipped: %s", exc)
