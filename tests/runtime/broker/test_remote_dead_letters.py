"""A remote drain on a real loopback broker: nothing leaves the server before the client has it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import Bus
from runtime.broker._client import Channel
from runtime.broker._remote import RemoteBus
from runtime.broker._server import BusServer
from runtime.broker._wire import NotTransferableError

KEY = b"remote-dead-letters-key"


class Unlisted:
    """A class neither side allowed: its dead letters cannot cross."""


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        orders = bus.create_topic("orders", ack_timeout=None)
        orders.subscribe(lambda d: d.nack("refused"), group="billing")
        yield bus


def dead_lettered(bus: Bus, *messages: object) -> None:
    for message in messages:
        bus.publish("orders", message)
    assert bus.topic("orders").join(timeout=5)


def test_a_remote_drain_returns_and_removes_the_letters(bus: Bus, remote: RemoteBus) -> None:
    dead_lettered(bus, "a", "b")

    drained = remote.dead_letters("orders").drain()

    assert [(d.message, d.error) for d in drained] == [("a", "refused"), ("b", "refused")]
    assert len(bus.topic("orders").dead_letters) == 0


def test_a_drain_whose_reply_cannot_cross_leaves_every_letter_on_the_server(
    bus: Bus, remote: RemoteBus,
) -> None:
    dead_lettered(bus, "a", Unlisted(), "c")

    with pytest.raises(NotTransferableError, match="Unlisted"):
        remote.dead_letters("orders").drain()

    assert [d.message for d in bus.topic("orders").dead_letters][::2] == ["a", "c"]
    assert len(bus.topic("orders").dead_letters) == 3


def test_a_drain_the_client_never_confirms_removes_nothing(bus: Bus, server: BusServer) -> None:
    dead_lettered(bus, "a", "b")

    with Channel(server.address, KEY) as channel:
        _, letters = channel.call("drain_dead_letters", "orders")

    assert [d.message for d in letters] == ["a", "b"]
    assert [d.message for d in bus.topic("orders").dead_letters] == ["a", "b"]


def test_a_confirmed_drain_removes_exactly_what_it_sent(bus: Bus, server: BusServer) -> None:
    dead_lettered(bus, "a", "b")

    with Channel(server.address, KEY) as channel:
        ticket, letters = channel.call("drain_dead_letters", "orders")
        dead_lettered(bus, "later")  # arrives between the read and the confirmation
        removed = channel.call("confirm_drain", ticket)
        with pytest.raises(LookupError, match="no drain"):
            channel.call("confirm_drain", ticket)

    assert ([d.message for d in letters], removed) == (["a", "b"], 2)
    assert [d.message for d in bus.topic("orders").dead_letters] == ["later"]
