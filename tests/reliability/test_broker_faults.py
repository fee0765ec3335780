"""Hostile input at the broker endpoint (issue 7, item 10).

Wrong keys, random bytes, truncated frames, huge length prefixes, pickles that would run
code, and a flood of connections: each one ends only its own connection; a well-behaved
client is served before, during and after; nothing executes.

The endpoint is started with ``Bus.serve``; the tests talk through the broker's own
frame channel (``runtime.broker._client.Channel``) to send exactly the frames they mean.
"""

from __future__ import annotations

import os
import pickle
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import AuthenticationError, Client
from pathlib import Path
from typing import Any

import pytest
from support.frames import frame, reply
from support.reliability import figures, process_usage, wait_until  # noqa: F401

from runtime import Bus

pytestmark = pytest.mark.reliability

KEY = b"reliability-suite-key"


def _serve(bus: Bus, **limits: Any) -> Any:
    return bus.serve(("127.0.0.1", 0), authkey=KEY, **limits)


def _client(address: Any, authkey: bytes = KEY) -> Any:
    from runtime.broker._client import Channel

    return Channel(address, authkey, connect_timeout=5.0)


class _Probe:
    """The well-behaved client: one long-lived connection, plus a fresh one per check."""

    def __init__(self, address: Any) -> None:
        self.address = address
        self.channel = _client(address)
        self.published = 0

    def check(self) -> None:
        assert self.channel.call("ping", timeout=10) == "pong"
        self.channel.call("publish", "t", {"n": self.published}, None, None, None, timeout=10)
        self.published += 1
        with _client(self.address) as fresh:
            assert "t" in fresh.call("topics", timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Bus, Any, _Probe]]:
    with Bus() as bus:
        bus.create_topic("t", ack_timeout=None).create_group("kept")
        server = _serve(bus, handshake_timeout=2.0)
        probe = _Probe(server.address)
        try:
            probe.check()
            yield bus, server, probe
            probe.check()
        finally:
            probe.channel.close()
            server.close()


def _raw(address: Any) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.settimeout(10)
    return sock


def _closed_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Read until the server ends the connection (EOF or reset); False on timeout."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def _authenticated(address: Any) -> Any:
    """A raw `multiprocessing.connection` that passed the challenge (frames are ours to forge)."""
    return Client(address, authkey=KEY)


def _frame_closed(connection: Any, timeout: float = 10.0) -> bool:
    """True when the server closed ``connection`` (answering nothing) within ``timeout``."""
    try:
        if not connection.poll(timeout):
            return False
        connection.recv_bytes()
    except (EOFError, OSError):
        return True
    return False


def _refused_alone(connection: Any, timeout: float = 10.0) -> bool:
    """True when the server answered with a typed refusal and then still served a ping."""
    from runtime.broker._wire import NotTransferableError, encode

    if not connection.poll(timeout):
        return False
    status, error = reply(connection)
    if status != "error" or not isinstance(error, NotTransferableError):
        return False
    connection.send_bytes(frame(encode(("ping", ())), call_id=2))
    return bool(connection.poll(timeout)) and reply(connection, call_id=2) == ("ok", "pong")


class _Reduce:
    """Pickles to ``callable(*args)``: what a hostile peer would send."""

    def __init__(self, target: Any, args: tuple[Any, ...]) -> None:
        self._target, self._args = target, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self._target, self._args


def test_wrong_authkey_is_refused_and_server_keeps_serving(served: Any, figures: Any) -> None:  # noqa: F811
    _, server, probe = served
    refused = 0

    for attempt in range(20):
        with pytest.raises((AuthenticationError, ConnectionError)):
            _client(server.address, authkey=b"not-the-key-%d" % attempt)
        refused += 1
        if attempt % 5 == 0:
            probe.check()

    figures(faults=refused, refused=refused, served_checks=probe.published)
    assert refused == 20


def test_random_bytes_and_truncated_frames_close_only_their_connection(
    served: Any, figures: Any,  # noqa: F811
) -> None:
    _, server, probe = served
    rng = random.Random(10)
    closed = 0

    for size in (4, 5, 17, 256, 4096, 70_000, 300):  # before authentication: random bytes
        sock = _raw(server.address)
        try:
            # a length prefix the challenge cannot accept (partial prefixes: tested below)
            sock.sendall(b"\x7f" + rng.randbytes(size - 1))
            closed += _closed_by_server(sock)
        finally:
            sock.close()
        probe.check()
    for announced, sent in ((100, 10), (5000, 4999), (1, 0)):  # after it: truncated frames
        connection = _authenticated(server.address)
        sock = socket.socket(fileno=os.dup(connection.fileno()))
        try:
            sock.sendall(struct.pack("!i", announced) + b"x" * sent)
            sock.shutdown(socket.SHUT_WR)
            closed += _closed_by_server(sock)
        finally:
            sock.close()
            connection.close()
        probe.check()
    for garbage in (b"", b"\x80\x05", b"not a pickle", rng.randbytes(300)):  # whole, not pickles
        connection = _authenticated(server.address)
        try:
            connection.send_bytes(frame(garbage))  # a call id, then no pickle
            closed += _frame_closed(connection)
        finally:
            connection.close()
        probe.check()

    figures(faults=14, closed=closed, served_checks=probe.published)
    assert closed == 14
    assert wait_until(lambda: server.connections == 1, 10.0)  # only the probe's connection


def test_huge_length_prefixes_are_refused_without_reading(served: Any, figures: Any) -> None:  # noqa: F811
    _, server, probe = served
    closed = 0

    for prefix in (struct.pack("!i", 0x7FFFFFFF), struct.pack("!i", -1) + struct.pack("!Q", 2**62),
                   struct.pack("!i", 64 * 1024 * 1024 + 1)):
        connection = _authenticated(server.address)
        sock = socket.socket(fileno=os.dup(connection.fileno()))
        try:
            started = time.monotonic()
            sock.sendall(prefix)  # the body never comes: the server must not wait for it
            closed += _closed_by_server(sock, timeout=10.0)
            assert time.monotonic() - started < 5.0
        finally:
            sock.close()
            connection.close()
        probe.check()

    figures(faults=3, closed=closed)
    assert closed == 3


def test_pickles_that_would_run_code_are_refused_and_nothing_runs(
    served: Any, tmp_path: Path, figures: Any,  # noqa: F811
) -> None:
    bus, server, probe = served
    marker = tmp_path / "pwned"
    import builtins
    import importlib
    import subprocess

    attacks = [
        _Reduce(os.system, (f"touch {marker}",)),
        _Reduce(subprocess.Popen, (["touch", str(marker)],)),
        _Reduce(builtins.eval, (f"open({str(marker)!r}, 'w')",)),
        _Reduce(builtins.exec, (f"open({str(marker)!r}, 'w')",)),
        _Reduce(importlib.import_module, ("antigravity",)),
        _Reduce(builtins.__import__, ("antigravity",)),
        ("publish", ("t", _Reduce(os.system, (f"touch {marker}",)), None, None, None)),
    ]
    refused = 0
    for attack in attacks:
        connection = _authenticated(server.address)
        try:
            connection.send_bytes(frame(pickle.dumps(attack, protocol=5)))
            refused += _refused_alone(connection)
        finally:
            connection.close()
        probe.check()
    # the same, before authenticating: the server must not even read it as a frame
    sock = _raw(server.address)
    try:
        pickled = pickle.dumps(attacks[0], protocol=5)
        sock.sendall(struct.pack("!i", len(pickled)) + pickled)
        refused += _closed_by_server(sock)
    finally:
        sock.close()

    figures(faults=len(attacks) + 1, refused=refused, executed=marker.exists())
    assert refused == len(attacks) + 1
    assert not marker.exists()
    assert "antigravity" not in __import__("sys").modules
    assert bus.topic("t").stats().published == probe.published


def test_flood_of_200_silent_connections_does_not_lock_out_a_client(
    served: Any, figures: Any,  # noqa: F811
) -> None:
    _, server, probe = served
    flood: list[socket.socket] = []
    lock = threading.Lock()

    def connect(count: int) -> None:
        for _ in range(count):
            sock = _raw(server.address)
            with lock:
                flood.append(sock)

    openers = [threading.Thread(target=connect, args=(25,)) for _ in range(8)]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(timeout=60)
    served_during = 0
    try:
        for _ in range(5):
            probe.check()  # a new, authenticated connection while the flood is open
            served_during += 1
    finally:
        for sock in flood:
            sock.close()
        figures(faults=200, served_during_flood=served_during)


def test_flood_of_200_garbage_connections_each_closes_alone(served: Any, figures: Any) -> None:  # noqa: F811
    _, server, probe = served
    fds_before, threads_before = process_usage()
    rng = random.Random(200)
    closed = 0
    lock = threading.Lock()

    def attack(seed: int) -> None:
        nonlocal closed
        sock = _raw(server.address)
        try:
            sock.sendall(b"\x7f" + random.Random(seed).randbytes(63))
            # the listener's accept backlog is 1: in a burst, SYN retransmits delay some peers
            ended = _closed_by_server(sock, timeout=40.0)
        finally:
            sock.close()
        with lock:
            closed += ended

    for _wave in range(4):
        threads = [threading.Thread(target=attack, args=(rng.random(),)) for _ in range(50)]
        for thread in threads:
            thread.start()
        probe.check()  # served while the wave is under way
        for thread in threads:
            thread.join(timeout=30)

    assert wait_until(lambda: server.connections == 1, 10.0)
    fds_after, threads_after = process_usage()
    figures(faults=200, closed=closed, fds_before=fds_before, fds_after=fds_after,
            threads_before=threads_before, threads_after=threads_after)
    assert closed == 200
    assert wait_until(lambda: process_usage()[1] <= threads_before, 10.0)
    assert process_usage()[0] <= fds_before + 2


def test_partial_frames_before_authentication_are_dropped_after_the_handshake_timeout(
    served: Any, figures: Any,  # noqa: F811
) -> None:
    _, server, probe = served
    closed = 0
    socks = []
    try:
        for partial in (b"\x00", b"\x00\x00\x00", struct.pack("!i", 100) + b"x" * 10):
            sock = _raw(server.address)
            socks.append(sock)
            sock.sendall(partial)
        for sock in socks:
            closed += _closed_by_server(sock, timeout=2.0 + 3.0)  # handshake_timeout + margin
        probe.check()
    finally:
        for sock in socks:
            sock.close()
    figures(faults=3, closed=closed)
    assert closed == 3


def test_flood_of_one_byte_connections_does_not_lock_out_a_client(
    served: Any, figures: Any,  # noqa: F811
) -> None:
    _, server, probe = served
    flood = []
    served_during = 0
    try:
        for _ in range(70):  # more than max_connections (64)
            sock = _raw(server.address)
            sock.sendall(b"\x00")
            flood.append(sock)
        # beyond the handshake timeout every slow peer is dropped: only the probe is left
        assert wait_until(lambda: server.connections == 1, 2.0 + 3.0)
        for _ in range(3):
            probe.check()
            served_during += 1
    finally:
        for sock in flood:
            sock.close()
        figures(faults=70, served_during_flood=served_during)
