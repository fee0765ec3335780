"""One authenticated connection to a broker, carrying one request at a time."""

from __future__ import annotations

import threading
from multiprocessing.connection import Client, Connection
from typing import Any

from runtime.broker._auth import authenticate_client
from runtime.broker._protocol import wire_types
from runtime.broker._wire import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameRefusedError,
    NotTransferableError,
    TypeRegistry,
    encode,
    read_frame,
)

__all__ = ["Address", "Channel", "authkey_bytes", "parse_address"]

Address = tuple[str, int]

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_CALL_TIMEOUT = 60.0


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
    """A request/reply connection to a `BusServer`; thread-safe (calls are serialised).

    Connecting blocks until the HMAC challenge passed both ways. A request is pickled and
    its size checked before anything is sent; a value the server refuses fails that
    call alone (`NotTransferableError`) and the channel stays usable.

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
        multiprocessing.AuthenticationError: the key is wrong.
        ConnectionError: the server is unreachable, full or went away.
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
        self.address = parse_address(address)
        self._authkey = authkey_bytes(authkey)
        self._connect_timeout = connect_timeout
        self._registry = registry if registry is not None else wire_types()
        self._max_frame_size = max_frame_size
        self._reconnect = reconnect
        self._lock = threading.Lock()
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
            TimeoutError: no reply in time (the connection is then closed).
            ConnectionError: the connection is closed or broke.
        """
        payload = encode((operation, args), self._max_request, operation)
        with self._lock:
            connection = self._usable_connection()
            try:
                connection.send_bytes(payload)
                if not connection.poll(timeout):
                    raise TimeoutError(f"broker did not answer {operation!r} within {timeout}s")
                status, value = read_frame(connection, self._registry, self._max_frame_size)
            except TimeoutError:
                self._drop()
                raise
            except FrameRefusedError as exc:  # the reply was read whole: still in step
                raise NotTransferableError(operation, f"its reply: {exc}") from None
            except (EOFError, OSError) as exc:
                self._drop()
                raise ConnectionError(f"broker connection lost during {operation!r}") from exc
        if status != "ok":
            if isinstance(value, NotTransferableError) and not value.args[0]:
                raise NotTransferableError(operation, value.args[1])
            raise value
        return value

    def _usable_connection(self) -> Connection:
        """The connection, reopened first when the server ended it while idle (lock held).

        With no call in flight the server never writes, so a readable connection means
        it was closed: reopening cannot duplicate a request.
        """
        connection = self._connection
        if connection is None:
            raise ConnectionError("broker connection is closed")
        if self._reconnect and connection.poll(0):
            connection.close()
            self._connection = None
            self._connection = connection = _open(self.address, self._authkey, self._connect_timeout)
        return connection

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _open(address: Address, authkey: bytes, timeout: float) -> Connection:
    try:
        connection = Client(address)
    except OSError as exc:
        raise ConnectionError(f"cannot reach the broker at {address}: {exc}") from exc
    try:
        authenticate_client(connection, authkey, timeout)
    except (EOFError, OSError) as exc:
        connection.close()
        raise ConnectionError(f"the broker at {address} closed the connection") from exc
    except BaseException:
        connection.close()
        raise
    return connection
