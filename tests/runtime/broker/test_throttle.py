"""Wrong keys slow their host down: measured on a real loopback broker, and on a fake clock."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection

import pytest

from runtime import Bus
from runtime.broker._auth import authenticate_client
from runtime.broker._client import Channel
from runtime.broker._server import BusServer
from runtime.broker._throttle import FIRST_DELAY, MAX_DELAY, HandshakeThrottle

KEY = b"0123456789abcdef-throttle"


@pytest.fixture
def server() -> Iterator[BusServer]:
    with Bus() as bus, bus.serve(authkey=KEY, handshake_timeout=10.0) as server:
        yield server


def wrong_key_attempts(server: BusServer, count: int) -> float:
    """Seconds ``count`` sequential wrong-key handshakes from 127.0.0.1 take."""
    started = time.monotonic()
    for attempt in range(count):
        with pytest.raises(AuthenticationError):
            Channel(server.address, b"guess-%d" % attempt, connect_timeout=10.0)
    return time.monotonic() - started


def test_repeated_wrong_keys_from_one_host_slow_down(server: BusServer) -> None:
    elapsed = wrong_key_attempts(server, 6)

    # turns 2-6 wait 0.05 + 0.1 + 0.2 + 0.4 + 0.8 s; unthrottled, 6 tries take ~5 ms
    assert elapsed >= 1.5, f"6 wrong keys took {elapsed:.3f}s"
    started = time.monotonic()
    with Channel(server.address, KEY, connect_timeout=10.0) as channel:
        assert channel.call("ping") == "pong"
    assert time.monotonic() - started < MAX_DELAY + 2.0  # one turn at most, then served
    assert wrong_key_attempts(server, 1) < 0.5  # the right key cleared the host's delay


def from_another_loopback_address(server: BusServer, key: bytes) -> Connection:
    """A handshake from 127.0.0.2: another host, as the server sees it."""
    sock = socket.create_connection(server.address, timeout=5.0, source_address=("127.0.0.2", 0))
    sock.settimeout(None)
    connection = Connection(sock.detach())
    try:
        authenticate_client(connection, key, 5.0)
    except BaseException:
        connection.close()
        raise
    return connection


def test_another_host_is_served_at_once_while_one_waits_its_turn(server: BusServer) -> None:
    wrong_key_attempts(server, 6)  # 127.0.0.1 now waits a second per turn
    refused: list[BaseException] = []

    def guess() -> None:
        try:
            Channel(server.address, b"guess-again", connect_timeout=10.0)
        except BaseException as exc:
            refused.append(exc)

    guessing = threading.Thread(target=guess)
    guessing.start()  # waits its turn on the server: the accept loop goes on
    started = time.monotonic()
    connection = from_another_loopback_address(server, KEY)
    served_in = time.monotonic() - started
    connection.close()
    guessing.join(timeout=15)

    assert served_in < 0.5, f"127.0.0.2 waited {served_in:.3f}s behind 127.0.0.1's turn"
    assert not guessing.is_alive()
    assert [type(e) for e in refused] == [AuthenticationError]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_delay_doubles_per_failure_up_to_the_cap_and_a_success_clears_it() -> None:
    throttle = HandshakeThrottle(clock=FakeClock())
    delays = []

    for _ in range(7):
        throttle.failed("10.0.0.1")
        delays.append(throttle.delay("10.0.0.1"))

    assert delays == [FIRST_DELAY * 2 ** n for n in range(5)] + [MAX_DELAY, MAX_DELAY]
    assert throttle.delay("10.0.0.2") == 0.0
    throttle.succeeded("10.0.0.1")
    assert throttle.delay("10.0.0.1") == 0.0


def test_parallel_attempts_of_a_host_take_turns_a_delay_apart() -> None:
    clock = FakeClock()
    throttle = HandshakeThrottle(clock=clock)
    for _ in range(3):
        throttle.failed("10.0.0.1")  # spacing 0.2 s, next turn at 100.2

    early = throttle.wait_turn("10.0.0.1", deadline=100.1, cancelled=lambda: False)
    clock.now = 100.2
    first = throttle.wait_turn("10.0.0.1", deadline=100.25, cancelled=lambda: False)
    second = throttle.wait_turn("10.0.0.1", deadline=100.25, cancelled=lambda: False)
    clock.now = 100.4
    third = throttle.wait_turn("10.0.0.1", deadline=101.0, cancelled=lambda: False)

    assert (early, first, second, third) == (False, True, False, True)
    assert throttle.wait_turn("10.0.0.9", deadline=0.0, cancelled=lambda: False)


def test_closing_releases_a_waiting_turn() -> None:
    throttle = HandshakeThrottle()
    throttle.failed("10.0.0.1")
    throttle.failed("10.0.0.1")
    results: list[bool] = []
    waiting = threading.Thread(target=lambda: results.append(
        throttle.wait_turn("10.0.0.1", time.monotonic() + 60.0, lambda: False)))
    waiting.start()

    throttle.close()
    waiting.join(timeout=5)

    assert results == [False]
