"""What crosses the broker: default value types, allow= classes, refusals that fail alone, keys."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import pickle
import uuid
from collections.abc import Iterator
from decimal import Decimal
from multiprocessing import AuthenticationError
from typing import NamedTuple

import pytest

from actors.errors import MessageNotSerializableError
from runtime import Bus
from runtime.broker._remote import RemoteBus, connect
from runtime.broker._server import BusServer, serve
from runtime.broker._wire import NotTransferableError
from runtime.cli._endpoint import CliError, authkey

KEY = b"allow-list-key"
SMALL_FRAME = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Order:
    order_id: int
    amount: Decimal


class Point(NamedTuple):
    x: int
    y: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        bus.create_topic("orders", ack_timeout=None)
        yield bus


@pytest.fixture
def server(bus: Bus) -> Iterator[BusServer]:
    with serve(bus, authkey=KEY, max_frame_size=SMALL_FRAME) as server:
        yield server


@pytest.fixture
def remote(server: BusServer) -> Iterator[RemoteBus]:
    with connect(server.address, authkey=KEY, max_frame_size=SMALL_FRAME) as remote:
        yield remote


def test_refused_type_fails_that_call_alone_and_names_the_type(bus: Bus, remote: RemoteBus) -> None:
    topic = remote.topic("orders")

    with pytest.raises(MessageNotSerializableError, match="Order") as refused:
        topic.publish(Order(1, Decimal("9.50")))
    message_id = topic.publish("next")

    assert isinstance(refused.value, TypeError)
    assert "allow" in str(refused.value)
    assert bus.topic("orders").stats().published == 1
    assert message_id and remote.topics() == ["orders"]


def test_unpicklable_value_fails_before_sending(bus: Bus, remote: RemoteBus) -> None:
    with pytest.raises(MessageNotSerializableError, match="cannot pickle"):
        remote.topic("orders").publish(lambda: None)

    assert remote.topic("orders").publish("after") != ""
    assert bus.topic("orders").stats().published == 1


def test_frame_over_the_size_limit_fails_before_sending_and_names_the_size(
    bus: Bus, remote: RemoteBus
) -> None:
    with pytest.raises(MessageNotSerializableError, match=f"over max_frame_size={SMALL_FRAME}"):
        remote.topic("orders").publish(b"x" * (SMALL_FRAME + 1))

    assert remote.topic("orders").publish(b"x" * 1000) != ""
    assert bus.topic("orders").stats().published == 1


def test_a_client_with_a_larger_limit_is_held_to_the_servers(bus: Bus, server: BusServer) -> None:
    with connect(server.address, authkey=KEY) as remote:  # its own limit: the 64 MiB default
        with pytest.raises(MessageNotSerializableError, match=f"over max_frame_size={SMALL_FRAME}"):
            remote.topic("orders").publish(b"x" * (SMALL_FRAME + 1))
        after = remote.topic("orders").publish(b"x" * 1000)

    assert after != ""
    assert bus.topic("orders").stats().published == 1


VALUES = [
    datetime.datetime(2026, 11, 24, 19, 30, 5, 120, tzinfo=datetime.UTC),
    datetime.datetime(2026, 1, 2, 3, 4, 5),
    datetime.date(2026, 11, 24),
    datetime.time(19, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    datetime.timedelta(days=2, microseconds=7),
    Decimal("-12.3400"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    {"at": datetime.date(2026, 1, 1), "amounts": [Decimal("1.5"), Decimal("2")]},
]


def test_datetime_decimal_and_uuid_cross_by_default_both_ways(bus: Bus, remote: RemoteBus) -> None:
    local = bus.topic("orders").subscription(group="local")
    pulled = remote.topic("orders").subscription(group="remote")

    for value in VALUES:
        remote.topic("orders").publish(value)
    received = [local.receive(timeout=5) for _ in VALUES]
    for delivery in received:
        delivery.ack()
    relayed = [pulled.receive(timeout=5) for _ in VALUES]
    for remote_delivery in relayed:
        remote_delivery.ack()

    assert [d.message for d in received] == VALUES
    assert [d.message for d in relayed] == VALUES
    assert type(received[0].message) is datetime.datetime


def test_allowed_plain_classes_cross_both_ways(bus: Bus) -> None:
    allow = (Order, Point, Color)
    values = [Order(7, Decimal("3.10")), Point(1, -2), Color.BLUE, [Order(8, Decimal("0"))]]
    with serve(bus, authkey=KEY, allow=allow) as server, \
            connect(server.address, authkey=KEY, allow=allow) as remote:
        local = bus.topic("orders").subscription(group="local")
        pulled = remote.topic("orders").subscription(group="remote")

        for value in values:
            remote.topic("orders").publish(value)
        received = [local.receive(timeout=5) for _ in values]
        relayed = [pulled.receive(timeout=5) for _ in values]
        for delivery in received:
            delivery.ack()
        for remote_delivery in relayed:
            remote_delivery.ack()

    assert [d.message for d in received] == values
    assert [d.message for d in relayed] == values
    assert type(received[1].message) is Point and received[2].message is Color.BLUE


def test_a_message_the_puller_may_not_read_is_dead_lettered_and_reported(bus: Bus) -> None:
    topic = bus.topic("orders")
    with serve(bus, authkey=KEY, allow=(Order,)) as server, connect(server.address, authkey=KEY) as remote:
        pulled = remote.topic("orders").subscription(group="remote")
        first = topic.publish(Order(1, Decimal("1"))).message_id  # the server allows it, the client not
        second = topic.publish(Point(1, 2)).message_id  # nobody allows it
        topic.publish("plain")

        with pytest.raises(MessageNotSerializableError, match=f"{first}.*Order"):
            pulled.receive(timeout=5)
        with pytest.raises(MessageNotSerializableError, match=f"{second}.*Point"):
            pulled.receive(timeout=5)
        plain = pulled.receive(timeout=5)
        plain.ack()

    # The client said at subscribe which classes it reads: the server keeps both.
    assert plain.message == "plain"
    assert topic.join(timeout=5)
    letters = {dl.message_id: dl for dl in topic.dead_letters}
    assert list(letters) == [first, second]
    assert [dl.reason for dl in letters.values()] == ["error", "error"]
    assert "Order" in (letters[first].error or "") and "Point" in (letters[second].error or "")


@pytest.mark.parametrize("kind", [object, dict, type("Local", (), {})])
def test_allow_takes_only_plain_classes(bus: Bus, kind: type) -> None:
    with pytest.raises(TypeError, match="dataclasses, named tuples and enums"):
        serve(bus, authkey=KEY, allow=(kind,))


def test_allow_refuses_a_class_defined_in_a_function(bus: Bus) -> None:
    @dataclasses.dataclass
    class Inner:
        x: int

    with pytest.raises(TypeError, match="module level"):
        serve(bus, authkey=KEY, allow=(Inner,))


def test_str_authkey_is_its_utf8_bytes(bus: Bus) -> None:
    with serve(bus, authkey="clé-partagée") as server:
        with connect(server.address, authkey="clé-partagée".encode()) as remote:
            assert remote.topics() == ["orders"]
        with connect(server.address, authkey="clé-partagée") as remote:
            assert remote.topics() == ["orders"]
        with pytest.raises(AuthenticationError):
            connect(server.address, authkey="cle-partagee")


def test_cli_reads_hex_keys_and_plain_keys(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEY", "hex:00ff10")
    hex_key = authkey("TEST_KEY")
    monkeypatch.setenv("TEST_KEY", "00ff10")
    text_key = authkey("TEST_KEY")
    monkeypatch.setenv("TEST_KEY", "hex:zz")

    with pytest.raises(CliError, match="not hex"):
        authkey("TEST_KEY")
    assert (hex_key, text_key) == (b"\x00\xff\x10", b"00ff10")
    with serve(bus, authkey=hex_key) as server, \
            connect(server.address, authkey=bytes.fromhex("00ff10")) as remote:
        assert remote.topics() == ["orders"]


@pytest.mark.parametrize("key", [b"", "", 12])
def test_bad_authkey_is_a_type_error(bus: Bus, key: object) -> None:
    with pytest.raises(TypeError, match="authkey"):
        serve(bus, authkey=key)  # type: ignore[arg-type]


def test_not_transferable_error_pickles_and_is_a_type_error() -> None:
    error = NotTransferableError("publish", "its frame is 9 bytes, over max_frame_size=8")

    copy = pickle.loads(pickle.dumps(error))

    assert isinstance(copy, MessageNotSerializableError) and isinstance(copy, TypeError)
    assert copy.args == error.args
    assert str(copy) == "broker call 'publish' refused: its frame is 9 bytes, over max_frame_size=8"
