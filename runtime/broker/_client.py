"""One authenticated connection to a broker, carrying one request at a time."""

from __future__ import annotations

import threading
from multiprocessing.connection import Client, Connection
from typing import Any

from runtime.broker._auth import authenticate_client
from runtime.broker._protocol import wire_types
from runtime.broker._wire import DEFAULT_MAX_FRAME_SIZE, TypeRegistry, read_frame, write_frame

__all__ = ["Address", "Channel", "parse_address"]

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


class Channel:
    """A request/reply connection to a `BusServer`; thread-safe (calls are serialised).

    Connecting blocks until the HMAC challenge passed both ways.

    Args:
        address: the server's ``(host, port)`` or ``"host:port"``.
        authkey: the server's key.
        connect_timeout: bound of the connection and the challenge, in seconds.
        max_frame_size: the longest reply accepted.

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
    ) -> None:
        if not isinstance(authkey, bytes):
            raise TypeError("authkey must be bytes")
        self.address = parse_address(address)
        self._registry = registry if registry is not None else wire_types()
        self._max_frame_size = max_frame_size
        self._lock = threading.Lock()
        self._connection: Connection | None = _open(self.address, authkey, connect_timeout)

    @property
    def closed(self) -> bool:
        """True once `close` was called or the connection broke."""
        return self._connection is None

    def call(self, operation: str, *args: Any, timeout: float | None = DEFAULT_CALL_TIMEOUT) -> Any:
        """Send one request and block for its reply (at most ``timeout`` seconds).

        Raises:
            Exception: the error the server replied with.
            TimeoutError: no reply in time (the connection is then closed).
            ConnectionError: the connection is closed or broke.
        """
        with self._lock:
            connection = self._connection
            if connection is None:
                raise ConnectionError("broker connection is closed")
            try:
                write_frame(connection, (operation, args))
                if not connection.poll(timeout):
                    raise TimeoutError(f"broker did not answer {operation!r} within {timeout}s")
                status, value = read_frame(connection, self._registry, self._max_frame_size)
            except TimeoutError:
                self._drop()
                raise
            except (EOFError, OSError) as exc:
                self._drop()
                raise ConnectionError(f"broker connection lost during {operation!r}") from exc
        if status != "ok":
            raise value
        return value

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
