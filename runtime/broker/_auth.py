"""The HMAC challenge of `multiprocessing.connection`, bounded by a deadline.

`multiprocessing.connection.Listener.accept` runs the challenge in the accepting thread
with no timeout, so one silent peer would stall every later connection. The broker
accepts without a key and runs the same challenge (both directions, the standard
functions) in the connection's own thread, through a view of the connection whose
reads give up when the deadline passes (`TimeoutError`: a silent or slow peer is not a
wrong key). No frame is read before both sides proved they hold the key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

__all__ = ["AuthenticationError", "authenticate_client", "authenticate_server"]

_CHALLENGE_FRAME = 256


class _Deadline:
    """The two calls the challenge functions make, with reads bounded by a deadline."""

    __slots__ = ("_connection", "_deadline")

    def __init__(self, connection: Connection, timeout: float) -> None:
        self._connection = connection
        self._deadline = time.monotonic() + timeout

    def send_bytes(self, data: bytes) -> None:
        self._connection.send_bytes(data)

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0 or not self._connection.poll(remaining):
            raise TimeoutError("no answer to the key challenge in time")
        return self._connection.recv_bytes(maxlength or _CHALLENGE_FRAME)


def authenticate_server(
    connection: Connection, authkey: bytes, timeout: float,
    on_proven: Callable[[], None] = lambda: None,
) -> None:
    """Challenge the peer, then answer its challenge (the server's side).

    ``on_proven`` runs as soon as the peer proved its key, before the server answers
    the peer's challenge. The client's last step is a send it does not wait on, so a
    client can return from `authenticate_client` before this function does; it can
    never return before ``on_proven`` ran, since it waits for that answer.

    Raises:
        AuthenticationError: wrong key.
        TimeoutError: no answer within ``timeout`` seconds.
        EOFError, OSError: the peer went away or sent a malformed frame.
    """
    view = _Deadline(connection, timeout)
    deliver_challenge(view, authkey)  # type: ignore[arg-type]
    on_proven()
    answer_challenge(view, authkey)  # type: ignore[arg-type]


def authenticate_client(connection: Connection, authkey: bytes, timeout: float) -> None:
    """Answer the server's challenge, then challenge it (the client's side).

    Raises:
        AuthenticationError: wrong key.
        TimeoutError: no answer within ``timeout`` seconds.
        EOFError, OSError: the server went away (for example: it is full).
    """
    view = _Deadline(connection, timeout)
    answer_challenge(view, authkey)  # type: ignore[arg-type]
    deliver_challenge(view, authkey)  # type: ignore[arg-type]
