"""One authenticated connection to a broker, carrying the calls of any number of threads."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from runtime.broker._auth import authenticate_client
from runtime.broker._protocol import wire_types
from runtime.broker._wire import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameRefusedError,
    MalformedFrameError,
    NotTransferableError,
    TypeRegistry,
    decode,
    framed,
    unframed,
)
from runtime.core._settings import check_timeout
from runtime.errors import BrokerTimeoutError

__all__ = ["Address", "Channel", "authkey_bytes", "os_reason", "parse_address", "shut_down", "spelled"]

logger = logging.getLogger(__name__)

Address = tuple[str, int]

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_CALL_TIMEOUT = 60.0
_WAITING: Any = object()  # the reply slot of a call still in flight


def parse_address(address: Address | str) -> Address:
    """``("host", port)`` from a tuple or a ``"host:port"`` string.

    Raises:
        ValueError: not a host and a port.
    """
    if isinstance(address, str):
        host, sep, port = address.rpartition(":")
        if not sep or not host:
            raise ValueError(f"broker address must be 'host:port', got {address!r}")
        return host.strip("[]"), int(port)
    return str(address[0]), int(address[1])


def spelled(address: Address) -> str:
    """``host:port`` (an IPv6 host in brackets), as errors and logs name an address."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def authkey_bytes(authkey: bytes | str) -> bytes:
    """The key as bytes: a `str` is its UTF-8 encoding (``"hex:..."`` is not decoded here).

    Raises:
        TypeError: neither bytes nor str, or empty.
    """
    if isinstance(authkey, str):
        authkey = authkey.encode("utf-8")
    if not isinstance(authkey, bytes) or not authkey:
        raise TypeError(f"authkey must be non-empty bytes or str, got {type(authkey).__qualname__}")
    return authkey


class Channel:
    """A request/reply connection to a `BusServer`; thread-safe, calls in flight at once.

    Connecting blocks until the HMAC challenge passed both ways. Every request carries a
    call id and its reply the same id: calls of several threads are in flight together
    (an ack is not held behind another thread's blocking receive) and each reply goes
    to its own call, whatever the order the server answers in. A request is pickled and
    its size checked before anything is sent; a value the server refuses fails that
    call alone (`NotTransferableError`) and the channel stays usable.

    One thread at a time reads the connection for every waiting call; the others wait
    for it to hand them their reply. A call that gets no reply in time closes the
    connection, failing the calls still in flight (`ConnectionError`).

    Args:
        address: the server's ``(host, port)`` or ``"host:port"``.
        authkey: the server's key (a `str` is its UTF-8 bytes).
        connect_timeout: bound of the connection and the challenge, in seconds.
        max_frame_size: the longest reply accepted and request sent (requests are also
            held to the server's own limit, asked for on connecting).
        registry: the allow-list of replies (default: the runtime's types).
        reconnect: reopen a connection the server closed while no call was in flight
            (it ends sessions idle past its ``idle_timeout``, or pushes the idlest out
            when full). False for channels whose session holds state (a pull
            subscription): those see `ConnectionError` instead.

    Raises:
        TypeError, ValueError: ``connect_timeout`` is not a finite number > 0.
        multiprocessing.AuthenticationError: the key is wrong.
        BrokerTimeoutError: no connection, or no answer to the challenge, within
            ``connect_timeout`` (a `TimeoutError`; it names the address).
        ConnectionError: the server is unreachable (the OS's reason), full or went away.
    """

    def __init__(
        self,
        address: Address | str,
        authkey: bytes,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        registry: TypeRegistry | None = None,
        reconnect: bool = True,
    ) -> None:
        check_timeout("connect_timeout", connect_timeout)
        if connect_timeout is None or connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be a number of seconds > 0, got {connect_timeout!r}")
        self.address = parse_address(address)
        self._authkey = authkey_bytes(authkey)
        self._connect_timeout = connect_timeout
        self._registry = registry if registry is not None else wire_types()
        self._max_frame_size = max_frame_size
        self._reconnect = reconnect
        # `_lock` guards the connection, the reply slots, who reads and the counts below;
        # `_changed` (on that lock) wakes calls waiting for a reader. `_sending` orders
        # whole frames on the socket: a sender never holds `_lock`, so a long send
        # cannot stop the reader from handing replies out.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._sending = threading.Lock()
        self._replies: dict[int, Any] = {}
        self._reading = False
        self._sleepers = 0  # calls waiting on `_changed`
        self._users = 0  # calls in flight on the connection: the last one out closes it
        self._ids = itertools.count(1)
        self._connection: Connection | None = _open(self.address, self._authkey, connect_timeout)
        self._max_request = max_frame_size
        self._max_request = self._server_limit(connect_timeout)

    def _server_limit(self, timeout: float) -> int:
        """The longest request to send: ours, or the server's when that is shorter.

        A frame over the server's limit would cost the connection (the server cannot
        skip its body), so the check happens here, before sending.
        """
        try:
            limits = self.call("limits", timeout=timeout)
        except ValueError:  # a server that does not say: our own limit
            return self._max_frame_size
        server = limits.get("max_frame_size") if isinstance(limits, dict) else None
        return min(self._max_frame_size, server) if isinstance(server, int) else self._max_frame_size

    @property
    def registry(self) -> TypeRegistry:
        """The allow-list this side decodes replies with."""
        return self._registry

    @property
    def closed(self) -> bool:
        """True once `close` was called or the connection broke."""
        return self._connection is None

    def call(self, operation: str, *args: Any, timeout: float | None = DEFAULT_CALL_TIMEOUT) -> Any:
        """Send one request and block for its reply (at most ``timeout`` seconds).

        Raises:
            Exception: the error the server replied with.
            NotTransferableError: the request does not pickle, is over ``max_frame_size``,
                or names a type the server does not allow; or the reply names a type
                this side does not allow. Nothing else happens; the channel stays usable.
            TypeError, ValueError: ``timeout`` is not a finite number or None (nothing
                was sent).
            BrokerTimeoutError: no reply in time (a `TimeoutError`; the connection is
                then closed).
            ConnectionError: the connection is closed or broke.
        """
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            call_id = next(self._ids)
        payload = framed(call_id, (operation, args), self._max_request, operation)
        with self._lock:
            connection = self._usable_connection()
            self._replies[call_id] = _WAITING
            self._users += 1
        try:
            try:
                with self._sending:
                    connection.send_bytes(payload)
            except OSError as exc:
                with self._lock:
                    self._break(connection)
                raise ConnectionError(f"broker connection lost sending {operation!r}") from exc
            body = self._reply(call_id, connection, deadline, operation, timeout)
        finally:
            with self._lock:
                del self._replies[call_id]
                self._users -= 1
                if not self._users and self._connection is not connection:
                    connection.close()  # retired while this call used it: the last one out
        try:
            status, value = decode(body, self._registry)
        except MalformedFrameError as exc:
            with self._lock:
                self._break(connection)
            raise ConnectionError(f"the broker at {spelled(self.address)} sent garbage "
                                  f"answering {operation!r}: {exc}") from None
        except FrameRefusedError as exc:  # read whole and by its id: still in step
            raise NotTransferableError(operation, f"its reply: {exc}") from None
        if status != "ok":
            if isinstance(value, NotTransferableError) and not value.args[0]:
                raise NotTransferableError(operation, value.args[1])
            raise value
        return value

    def _reply(
        self, call_id: int, connection: Connection, deadline: float | None, operation: str,
        timeout: float | None,
    ) -> bytes:
        """Block until the reply of ``call_id`` arrives (its pickle); read for everyone
        while no other thread does."""
        with self._lock:
            while True:
                reply = self._replies[call_id]
                if reply is not _WAITING:
                    return reply  # type: ignore[no-any-return]
                if self._connection is not connection:
                    raise ConnectionError(f"broker connection lost during {operation!r}")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self._break(connection)
                    raise BrokerTimeoutError(
                        spelled(self.address), f"no answer to {operation!r} within {timeout}s")
                if self._reading:
                    self._sleepers += 1
                    try:
                        self._changed.wait(remaining)
                    finally:
                        self._sleepers -= 1
                else:
                    self._read_one(connection, remaining)

    def _read_one(self, connection: Connection, timeout: float | None) -> None:
        """Read one reply (or wait ``timeout``) and put it in its call's slot (``_lock``
        held on entry and exit, released while reading)."""
        self._reading = True
        self._lock.release()
        frame: bytes | None = None
        broken = False
        try:
            if connection.poll(timeout):
                frame = connection.recv_bytes(self._max_frame_size)
        except (EOFError, OSError):
            broken = True  # closed, reset, or a frame over max_frame_size: out of step
        finally:
            self._lock.acquire()
            self._reading = False
            if self._sleepers:
                self._changed.notify_all()
            if broken:
                self._break(connection)
        if frame is None:
            return
        try:
            call_id, body = unframed(frame)
        except MalformedFrameError:
            self._break(connection)
            return
        if self._replies.get(call_id) is _WAITING:
            self._replies[call_id] = body
        else:  # its call gave up (an exception while it waited): the reply has no taker
            logger.debug("broker: dropped the reply to abandoned call %d", call_id)

    def _usable_connection(self) -> Connection:
        """The connection, reopened first when the server ended it while idle (``_lock``
        held).

        With no call in flight the server never writes, so a readable connection means
        it was closed: reopening cannot duplicate a request.
        """
        connection = self._connection
        if connection is None:
            raise ConnectionError(f"the connection to the broker at {spelled(self.address)} is closed")
        if self._reconnect and not self._replies and connection.poll(0):
            connection.close()
            self._connection = None
            self._connection = connection = _open(self.address, self._authkey, self._connect_timeout)
        return connection

    def close(self) -> None:
        """Close the connection (calls in flight fail with `ConnectionError`); idempotent."""
        with self._lock:
            connection = self._connection
            if connection is not None:
                self._break(connection)

    def _break(self, connection: Connection) -> None:
        """Retire ``connection`` (``_lock`` held): waiting calls fail with `ConnectionError`.

        While calls are in flight on it, a shutdown wakes the one reading or sending,
        and the last call out closes it: closing a descriptor another thread uses could
        close a reused one.
        """
        if self._connection is connection:
            self._connection = None
            if self._sleepers:
                self._changed.notify_all()
        if self._users:
            shut_down(connection)
        else:
            connection.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def shut_down(connection: Connection) -> None:
    """Wake whoever blocks on ``connection`` (a shutdown through a duplicate descriptor)."""
    try:
        sock = socket.socket(fileno=os.dup(connection.fileno()))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already disconnected
    finally:
        sock.close()


def os_reason(exc: BaseException) -> str:
    """The OS's words for ``exc`` (``Connection refused``), else its text or type name."""
    strerror = getattr(exc, "strerror", None)
    return str(strerror or exc or type(exc).__name__)


def _open(address: Address, authkey: bytes, timeout: float) -> Connection:
    where = spelled(address)
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except TimeoutError:
        raise BrokerTimeoutError(where, f"no connection within {timeout}s") from None
    except OSError as exc:
        raise ConnectionError(f"cannot reach the broker at {where}: {os_reason(exc)}") from exc
    try:
        sock.settimeout(None)  # reads are bounded by polls, not by the socket
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # not TCP (a test's socket pair), or already reset: the handshake says which
    connection = Connection(sock.detach())
    try:
        authenticate_client(connection, authkey, timeout)
    except TimeoutError:
        connection.close()
        raise BrokerTimeoutError(
            where, f"no answer to the key challenge within {timeout}s "
            "(is an actorbus broker listening there?)") from None
    except (EOFError, OSError) as exc:
        connection.close()
        raise ConnectionError(
            f"the broker at {where} closed the connection during the handshake "
            f"({os_reason(exc) if str(exc) else 'it is full, or not an actorbus broker'})") from exc
    except BaseException:
        connection.close()
        raise
    return connection
