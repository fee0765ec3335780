"""The broker endpoint: serves a `Bus` to other processes over authenticated sockets.

Threads, all owned by the `BusServer` and stopped by `close()`:
- the acceptor, waiting on the listening socket (woken by a connection to itself);
- one thread per connection, at most ``max_connections``: when full, a new connection
  pushes out the oldest peer still in its handshake, else the authenticated session
  idle longest (at least `MIN_IDLE_TO_EVICT` seconds), else it is closed at once; a
  connection's thread runs its handshake when the peer's host has its turn
  (`HandshakeThrottle`: wrong keys slow their host down), and a second thread of its
  own serves its blocking receives;
- the sweeper, expiring leases without a heartbeat, orphaned stages and sessions idle
  past ``idle_timeout``.

`close()` shares one budget among every thread it joins; publishes blocked on
backpressure give up when the server closes (see `BrokerService.close`).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from runtime.broker._client import Address, authkey_bytes, parse_address, spelled
from runtime.broker._protocol import wire_types
from runtime.broker._service import DEFAULT_PUBLISH_TIMEOUT, BrokerService
from runtime.broker._session import Session
from runtime.broker._staging import DEFAULT_LIMITS, StagingLimits
from runtime.broker._throttle import HandshakeThrottle
from runtime.broker._wire import DEFAULT_MAX_FRAME_SIZE
from runtime.core._settings import check_timeout

__all__ = ["BusServer", "serve"]

logger = logging.getLogger(__name__)

DEFAULT_ADDRESS: Address = ("127.0.0.1", 0)
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_HANDSHAKE_TIMEOUT = 5.0
DEFAULT_SWEEP_INTERVAL = 0.25
DEFAULT_IDLE_TIMEOUT = 300.0
MIN_IDLE_TO_EVICT = 1.0  # a client between two calls is never pushed out
_BACKLOG = 128  # pending accepts: a burst of connects must not wait on TCP retries
_JOIN_TIMEOUT = 5.0


class BusServer:
    """Serves ``bus`` on ``address`` until `close()`; see `runtime.connect`.

    Binds loopback unless another address is given. Every connection must pass the
    HMAC challenge of ``authkey`` before any frame is read; a wrong key, a garbage or
    oversized frame drops that connection only. After a wrong key, the handshakes of
    that host take turns spaced by a delay that doubles per consecutive wrong key (up to
    a second) and clears on a right one, so keys cannot be tried fast; other hosts
    never wait. A frame naming a type outside the allow-list fails that call alone
    (`NotTransferableError`).

    Args:
        bus: the `Bus` to serve.
        address: ``(host, port)`` to bind; port 0 picks a free port (see `address`).
        authkey: the shared secret (non-empty bytes; a `str` is its UTF-8 bytes).
        allow: the user's plain classes (dataclasses, named tuples, enums) that may
            cross besides builtins, the `datetime` types, `Decimal` and `UUID`.
        max_connections: connections served at once.
        max_frame_size: longest request frame, in bytes.
        handshake_timeout: bound of the challenge (its host's turn included), in seconds.
        idle_timeout: a session with no request for this long is ended (None: never).
        sweep_interval: seconds between lease/stage expiry sweeps.
        clock: the time source of leases and stages.
        publish_timeout: bound of one remote publish or commit waiting on backpressure.
        staging_limits: bounds of what peers may stage for Spark's sink (decoded bytes
            per part and per producer; see `StagingLimits`).

    Raises:
        TypeError, ValueError: a bad key, ``allow`` entry or limit.
        OSError: the address cannot be bound.
    """

    def __init__(
        self, bus: Any, address: Address | str = DEFAULT_ADDRESS, *, authkey: bytes | str,
        allow: Iterable[type] = (), max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        sweep_interval: float = DEFAULT_SWEEP_INTERVAL, clock: Callable[[], float] = time.monotonic,
        publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT, staging_limits: StagingLimits = DEFAULT_LIMITS,
    ) -> None:
        if max_connections < 1 or max_frame_size < 1024:
            raise ValueError("max_connections must be >= 1 and max_frame_size >= 1024")
        for name, value in (("handshake_timeout", handshake_timeout), ("idle_timeout", idle_timeout),
                            ("sweep_interval", sweep_interval)):
            check_timeout(name, value)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        self._authkey = authkey_bytes(authkey)
        self._limits = (max_connections, max_frame_size, handshake_timeout)
        self._idle_timeout = idle_timeout
        self._registry = wire_types(allow)
        self.service = BrokerService(
            bus, publish_timeout=publish_timeout, staging_limits=staging_limits, clock=clock)
        self._throttle = HandshakeThrottle()
        self._listener = Listener(parse_address(address), backlog=_BACKLOG)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sessions: dict[Session, threading.Thread] = {}
        self._numbers = itertools.count(1)
        self._acceptor = threading.Thread(target=self._accept_loop, name="actorbus-broker-accept")
        self._sweeper = threading.Thread(
            target=self._sweep_loop, args=(sweep_interval,), name="actorbus-broker-sweep")
        self._acceptor.start()
        self._sweeper.start()

    @property
    def address(self) -> Address:
        """The bound ``(host, port)``."""
        host, port = self._listener.address
        return str(host), int(port)

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed.is_set()

    @property
    def connections(self) -> int:
        """Connections being served right now."""
        with self._lock:
            return sum(thread.is_alive() for thread in self._sessions.values())

    def close(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """Stop accepting, drop every connection, return leased messages; idempotent.

        Blocks until the server's threads ended, all of them within one budget of about
        ``timeout`` seconds: publishes blocked on backpressure give up at once.
        """
        if self._closed.is_set():
            return
        self._closed.set()
        deadline = time.monotonic() + timeout
        self.service.stop_waiting()
        self._throttle.close()
        self._wake_acceptor()
        self._acceptor.join(_left(deadline))
        with self._lock:
            sessions = dict(self._sessions)
        for session in sessions:
            session.interrupt()
        for thread in sessions.values():
            thread.join(_left(deadline))
        self._sweeper.join(_left(deadline))
        self.service.close()

    def _accept_loop(self) -> None:
        try:
            while not self._closed.is_set():
                try:
                    connection = self._listener.accept()
                except OSError as exc:
                    if self._closed.wait(0.1):
                        return
                    logger.warning("broker: accept failed: %s", exc)
                    continue
                if self._closed.is_set():
                    connection.close()
                    return
                self._start_session(connection, self._listener.last_accepted)
        finally:
            self._listener.close()

    def _start_session(self, connection: Connection, peer: Any) -> None:
        max_connections, max_frame_size, handshake_timeout = self._limits
        host, where = _peer(peer)
        _no_delay(connection)
        with self._lock:
            self._sessions = {s: t for s, t in self._sessions.items() if t.is_alive()}
            live = sum(not s.evicted for s in self._sessions)
            if live >= max_connections and not (self._evict_unauthenticated() or self._evict_idle()):
                logger.warning("broker: %d connections, refusing another", max_connections)
                connection.close()
                return
            session = Session(
                connection, self.service, authkey=self._authkey, registry=self._registry,
                max_frame_size=max_frame_size, handshake_timeout=handshake_timeout,
                peer=where, host=host, throttle=self._throttle)
            thread = threading.Thread(
                target=session.run, name=f"actorbus-broker-conn-{next(self._numbers)}")
            self._sessions[session] = thread
            thread.start()

    def _evict_unauthenticated(self) -> bool:
        """Full: make room by ending the oldest session still in its handshake (lock held).

        Peers that never authenticate cannot lock a real client out: a client proves
        its key in milliseconds, a silent flood is pushed out oldest first.
        """
        for session in self._sessions:  # insertion order: oldest first
            if not session.authenticated and not session.evicted:
                session.evicted = True  # its thread ends at once; close() still joins it
                session.interrupt()
                return True
        return False

    def _evict_idle(self) -> bool:
        """Full of proven peers: end the one idle longest, if idle a while (lock held).

        Idle authenticated connections cannot lock other clients out for good; a client
        that is pushed out and calls again reconnects (`Channel` ``reconnect``).
        """
        now = time.monotonic()
        idle = [(s.idle_for(now), s) for s in self._sessions if s.authenticated and not s.evicted]
        longest = max(idle, key=lambda pair: pair[0], default=None)
        if longest is None or longest[0] < MIN_IDLE_TO_EVICT:
            return False
        logger.info("broker: full, ending a session idle for %.1fs", longest[0])
        longest[1].evicted = True
        longest[1].interrupt()
        return True

    def _sweep_loop(self, interval: float) -> None:
        while not self._closed.wait(interval):
            self._end_overdue_handshakes()
            self._end_idle_sessions()
            try:
                self.service.sweep()
            except Exception:  # keep sweeping: one bad topic must not stop expiry
                logger.exception("broker: sweep failed")

    def _end_overdue_handshakes(self) -> None:
        """End sessions still unauthenticated past their deadline (a partial frame)."""
        now = time.monotonic()
        with self._lock:
            overdue = [s for s, t in self._sessions.items() if t.is_alive() and s.overdue(now)]
        for session in overdue:
            session.interrupt()

    def _end_idle_sessions(self) -> None:
        if self._idle_timeout is None:
            return
        now = time.monotonic()
        with self._lock:
            idle = [s for s, t in self._sessions.items()
                    if t.is_alive() and s.idle_for(now) > self._idle_timeout]
        for session in idle:
            logger.info("broker: ending a session idle past idle_timeout=%ss", self._idle_timeout)
            session.interrupt()

    def _wake_acceptor(self) -> None:
        host, port = self.address
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        try:
            Client((host, port)).close()
        except OSError as exc:  # cannot happen on a bound loopback port; say so if it does
            logger.warning("broker: cannot wake the acceptor: %s", exc)

    def __enter__(self) -> BusServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "serving"
        return f"<BusServer {self.address[0]}:{self.address[1]} {state}>"


def _peer(address: Any) -> tuple[str, str]:
    """``(host, "host:port")`` of an accepted peer's address (a pair, or what a test gave)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), spelled((str(address[0]), int(address[1])))
    return str(address), str(address)


def _no_delay(connection: Connection) -> None:
    """Send small replies at once: calls are pipelined, so a reply may follow another
    before the peer acknowledged it, which Nagle's algorithm would hold back."""
    try:
        sock = socket.socket(fileno=os.dup(connection.fileno()))
    except OSError:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # not TCP, or already reset: the handshake finds out
    finally:
        sock.close()


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def serve(
    bus: Any, address: Address | str = DEFAULT_ADDRESS, *, authkey: bytes | str, **limits: Any
) -> BusServer:
    """Serve ``bus`` to other processes; the body of ``Bus.serve``.

    Returns at once with the running `BusServer` (``server.address``, ``server.close()``).
    See `BusServer` for ``limits`` and errors.
    """
    return BusServer(bus, address, authkey=authkey, **limits)
