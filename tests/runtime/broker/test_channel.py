"""The client channel on real loopback sockets: arguments checked before sending, every
reply matched to its call, connection errors that name the address and the reason."""

from __future__ import annotations

import logging
import math
import socket
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection, Listener
from typing import Any

import pytest
from support.frames import frame, reply

from runtime import Bus
from runtime.broker._auth import authenticate_server
from runtime.broker._client import Channel
from runtime.broker._remote import RemoteBus
from runtime.broker._server import BusServer, serve
from runtime.broker._wire import CALL_ID, encode, framed, unframed
from runtime.errors import BrokerTimeoutError, TopicClosedError

KEY = b"channel-test-key"


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        bus.create_topic("orders", ack_timeout=None)
        yield bus


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf])
def test_a_non_finite_publish_timeout_is_refused_before_sending(
    bus: Bus, remote: RemoteBus, timeout: float,
) -> None:
    with pytest.raises(ValueError, match="finite"):
        remote.topic("orders").publish(b"x", timeout=timeout)

    stats = remote.topic("orders").stats()  # the next reply is its own, not the publish's
    assert type(stats).__name__ == "TopicStats"
    assert (stats.published, bus.topic("orders").stats().published) == (0, 0)
    assert remote.topic("orders").publish(b"y", timeout=1.0) == "1"


def test_bad_keys_and_attributes_are_refused_before_sending(bus: Bus, remote: RemoteBus) -> None:
    orders = remote.topic("orders")

    with pytest.raises(TypeError, match="key"):
        orders.publish(b"x", key=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="attributes"):
        orders.publish(b"x", attributes={"n": 1})  # type: ignore[dict-item]

    assert bus.topic("orders").stats().published == 0


def test_a_non_finite_receive_timeout_is_refused_before_sending(remote: RemoteBus) -> None:
    subscription = remote.topic("orders").subscription(group="billing")

    with pytest.raises(ValueError, match="finite"):
        subscription.receive(timeout=math.nan)
    with pytest.raises(TimeoutError):
        subscription.receive(timeout=0.05)


def test_the_server_refuses_a_non_finite_timeout_from_a_raw_peer(bus: Bus, server: BusServer) -> None:
    with Channel(server.address, KEY) as channel:
        connection = channel._connection
        assert connection is not None
        # a peer that skips the client's checks: the server checks as well, and does not spin
        connection.send_bytes(framed(99, ("publish", ("orders", b"x", None, None, math.nan))))
        assert connection.poll(5.0)
        call_id, body = unframed(connection.recv_bytes())

    from runtime.broker._protocol import wire_types
    from runtime.broker._wire import decode
    status, error = decode(body, wire_types())
    assert (call_id, status, type(error)) == (99, "error", ValueError)
    assert bus.topic("orders").stats().published == 0


def fake_broker(answer: Any) -> tuple[Listener, threading.Thread]:
    """A listener that passes the challenge, then lets ``answer(connection)`` play the server."""
    listener = Listener(("127.0.0.1", 0))

    def run() -> None:
        with listener.accept() as connection:
            authenticate_server(connection, KEY, 5.0)
            answer(connection)

    thread = threading.Thread(target=run)
    thread.start()
    return listener, thread


def until_closed(connection: Connection) -> None:
    """Read until the client closes (a fake broker's last step)."""
    try:
        while connection.poll(10.0):
            connection.recv_bytes()
    except EOFError:
        return


def test_a_reply_to_another_call_is_never_taken_for_this_one() -> None:
    def answer(connection: Connection) -> None:
        call_id, _ = unframed(connection.recv_bytes())  # "limits"
        connection.send_bytes(framed(call_id + 1000, ("ok", "a stale reply")))
        connection.send_bytes(framed(call_id, ("ok", {"max_frame_size": 1 << 20})))
        call_id, _ = unframed(connection.recv_bytes())  # "ping"
        connection.send_bytes(framed(call_id - 1, ("ok", "the limits again")))
        connection.send_bytes(framed(call_id, ("ok", "pong")))
        until_closed(connection)

    listener, thread = fake_broker(answer)
    try:
        with Channel(listener.address, KEY) as channel:
            assert channel.call("ping", timeout=5.0) == "pong"
    finally:
        thread.join(timeout=10)
        listener.close()
    assert not thread.is_alive()


def test_replies_out_of_order_reach_their_own_calls() -> None:
    def answer(connection: Connection) -> None:
        call_id, _ = unframed(connection.recv_bytes())
        connection.send_bytes(framed(call_id, ("ok", {"max_frame_size": 1 << 20})))
        first, _ = unframed(connection.recv_bytes())
        second, _ = unframed(connection.recv_bytes())
        connection.send_bytes(framed(second, ("ok", "second")))
        connection.send_bytes(framed(first, ("ok", "first")))
        until_closed(connection)

    listener, thread = fake_broker(answer)
    results: dict[str, Any] = {}
    try:
        with Channel(listener.address, KEY) as channel:
            calling = threading.Thread(target=lambda: results.update(a=channel.call("a", timeout=5.0)))
            calling.start()
            # the second call goes out while the first waits: its reply comes back first
            results["b"] = channel.call("b", timeout=5.0) if _sent_first(channel) else None
            calling.join(timeout=10)
    finally:
        thread.join(timeout=10)
        listener.close()
    assert results == {"a": "first", "b": "second"}


def _sent_first(channel: Channel) -> bool:
    """Wait until the channel has one call in flight (the other thread's)."""
    from support.reliability import wait_until

    return wait_until(lambda: len(channel._replies) == 1, 5.0)


def test_connecting_to_a_closed_port_names_the_address_and_the_reason() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    with pytest.raises(ConnectionError) as caught:
        Channel(("127.0.0.1", port), KEY, connect_timeout=2.0)

    assert str(caught.value) == f"cannot reach the broker at 127.0.0.1:{port}: Connection refused"


def test_a_silent_listener_is_a_timeout_naming_the_address() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]

        with pytest.raises(BrokerTimeoutError) as caught:
            Channel(("127.0.0.1", port), KEY, connect_timeout=0.3)

    assert isinstance(caught.value, TimeoutError)
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "no answer to the key challenge within 0.3s" in str(caught.value)


def test_the_server_logs_a_peer_that_leaves_mid_handshake_with_its_address(
    server: BusServer, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="runtime.broker._session"):
        with socket.create_connection(server.address, timeout=5.0) as raw:
            host, port = raw.getsockname()[:2]
            local = f"{host}:{port}"
            raw.recv(4)  # the challenge has started: leave now
        with Channel(server.address, KEY) as channel:  # served after it
            assert channel.call("ping") == "pong"
        assert _logged(caplog, local)

    (text,) = [r.getMessage() for r in caplog.records if local in r.getMessage()]
    assert text.startswith(f"broker: refused {local}: the connection ended during the handshake (")
    assert not text.endswith("()")


def _logged(caplog: pytest.LogCaptureFixture, what: str) -> bool:
    from support.reliability import wait_until

    return wait_until(lambda: any(what in r.getMessage() for r in caplog.records), 5.0)


def test_a_refused_pickle_is_answered_under_its_own_call_id(server: BusServer) -> None:
    with Channel(server.address, KEY) as channel:
        connection = channel._connection
        assert connection is not None
        connection.send_bytes(frame(b"csubprocess\nPopen\n(S'true'\ntR.", call_id=41))
        connection.send_bytes(frame(encode(("ping", ())), call_id=42))
        assert connection.poll(5.0)
        refused = reply(connection, call_id=41)
        assert connection.poll(5.0)
        pong = reply(connection, call_id=42)

    assert refused[0] == "error" and "subprocess.Popen" in str(refused[1])
    assert pong == ("ok", "pong")


def test_closing_the_channel_fails_a_waiting_call(bus: Bus, server: BusServer) -> None:
    channel = Channel(server.address, KEY, reconnect=False)
    subscription_id = channel.call("subscribe", "orders", "billing", None)
    failures: list[BaseException] = []

    def receive() -> None:
        try:
            channel.call("receive", subscription_id, 30.0, timeout=60.0)
        except BaseException as exc:
            failures.append(exc)

    waiting = threading.Thread(target=receive)
    waiting.start()
    assert _sent_first(channel)
    channel.close()
    waiting.join(timeout=10)

    assert not waiting.is_alive()
    assert [type(f) for f in failures] in ([ConnectionError], [TopicClosedError])
    assert CALL_ID.size == 8


@pytest.mark.parametrize("limit", ["handshake_timeout", "idle_timeout", "sweep_interval"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0])
def test_server_limits_must_be_finite_and_positive(bus: Bus, limit: str, value: float) -> None:
    with pytest.raises(ValueError, match=limit):
        serve(bus, authkey=KEY, **{limit: value})


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, None])
def test_a_connect_timeout_must_be_finite_and_positive(server: BusServer, value: float | None) -> None:
    with pytest.raises(ValueError, match="connect_timeout"):
        Channel(server.address, KEY, connect_timeout=value)  # type: ignore[arg-type]
