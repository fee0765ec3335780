"""Hand-built hostile frames against the opcode audit: bounded work, no calls, no class edits."""

from __future__ import annotations

import copyreg
import dataclasses
import os
import pickle
import random
import struct
import time
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.frames import frame as framed
from support.frames import reply

from runtime import Bus, Message
from runtime.broker._protocol import wire_types
from runtime.broker._server import BusServer
from runtime.broker._wire import FrameRefusedError, MalformedFrameError, NotTransferableError, decode, encode

KEY = b"frame-audit-key"
HASH_MODULUS = (1 << 61) - 1


@dataclasses.dataclass(frozen=True)
class Order:
    order_id: int
    amount: int
    built: ClassVar[list[int]] = []

    def __post_init__(self) -> None:
        Order.built.append(self.order_id)  # shows whether a frame ran the constructor


def text(value: str) -> bytes:
    raw = value.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def publish_frame(value_ops: bytes) -> bytes:
    """``("publish", ("orders", <value_ops>, None, None, None))`` as raw protocol-5 opcodes."""
    return b"\x80\x05" + text("publish") + b"(" + text("orders") + value_ops + b"NNNt\x86."


def reduce_call(module: str, name: str, arg: int) -> bytes:
    return text(module) + text(name) + b"\x93J" + struct.pack("<i", arg) + b"\x85R"


@pytest.fixture
def bus() -> Iterator[Bus]:
    with Bus() as bus:
        bus.create_topic("orders", ack_timeout=None)
        yield bus


@pytest.fixture
def server(bus: Bus) -> Iterator[BusServer]:
    with bus.serve(authkey=KEY, allow=(Order,), handshake_timeout=2.0) as server:
        yield server


@pytest.fixture
def connection(server: BusServer) -> Iterator[Connection]:
    connection = Client(server.address, authkey=KEY)
    yield connection
    connection.close()


def assert_dropped_as_malformed(connection: Connection, frame: bytes) -> None:
    """The server drops the sender of ``frame`` without an answer; it decodes as malformed."""
    connection.send_bytes(framed(frame))
    assert connection.poll(5.0)
    with pytest.raises((EOFError, ConnectionResetError)):
        connection.recv_bytes()
    with pytest.raises(MalformedFrameError):
        decode(frame, wire_types())


def refusal(connection: Connection, frame: bytes) -> str:
    """Send ``frame``; return the refusal's text after checking the connection still serves."""
    connection.send_bytes(framed(frame))
    assert connection.poll(10.0)
    status, error = reply(connection)
    assert status == "error" and isinstance(error, NotTransferableError), error
    connection.send_bytes(framed(encode(("ping", ())), call_id=2))
    assert connection.poll(10.0)
    assert reply(connection, call_id=2) == ("ok", "pong")
    return str(error)


def test_a_set_of_colliding_ints_is_refused_at_once(bus: Bus, connection: Connection) -> None:
    colliding = b"".join(b"\x8a" + bytes([len(e)]) + e
                         for e in (pickle.encode_long(HASH_MODULUS * k) for k in range(1, 40_001)))
    frame = publish_frame(b"\x8f(" + colliding + b"\x90")  # EMPTY_SET, MARK, LONG1..., ADDITEMS

    started = time.monotonic()
    reason = refusal(connection, frame)

    assert time.monotonic() - started < 2.0  # loading it would take ~10 s of GIL
    assert len(frame) < 500_000 and "set members or dict keys" in reason
    assert bus.topic("orders").stats().published == 0


def test_many_small_int_and_string_keys_are_free(bus: Bus, connection: Connection) -> None:
    value = {"ints": set(range(50_000)), "names": {f"k{i}": i for i in range(50_000)}}

    connection.send_bytes(framed(encode(("publish", ("orders", value, None, None, None)))))

    assert connection.poll(10.0)
    status, _ = reply(connection)
    assert status == "ok"


@pytest.mark.parametrize(("module", "name"), [
    ("builtins", "bytearray"), ("builtins", "bytes"), ("builtins", "list"), ("builtins", "set"),
    ("builtins", "range"), ("builtins", "str"),
])
def test_tiny_frames_cannot_call_allocating_builtins(
    bus: Bus, connection: Connection, module: str, name: str
) -> None:
    frame = publish_frame(reduce_call(module, name, 1 << 20))

    reason = refusal(connection, frame)

    assert len(frame) < 80 and f"{module}.{name}" in reason
    assert bus.topic("orders").stats().published == 0


def test_list_of_range_is_refused(connection: Connection) -> None:
    inner = reduce_call("builtins", "range", 1 << 30)
    frame = publish_frame(text("builtins") + text("list") + b"\x93" + inner + b"\x85R")

    assert "builtins.list" in refusal(connection, frame)


def test_a_memo_index_far_past_the_memo_drops_the_sender(server: BusServer, connection: Connection) -> None:
    frame = b"\x80\x05Nr" + struct.pack("<I", 1 << 26) + b"."  # LONG_BINPUT 2**26: 1 GiB of memo

    assert_dropped_as_malformed(connection, frame)


def test_build_cannot_rewrite_an_allowed_class(connection: Connection) -> None:
    state = b"(N}" + text("tampered") + b"K\x01s\x86"  # (None, {"tampered": 1})
    frame = publish_frame(text("runtime.core._message") + text("Message") + b"\x93" + state + b"b")

    assert "BUILD" in refusal(connection, frame)
    assert not hasattr(Message, "tampered")


def test_reduce_on_an_allowed_dataclass_never_runs_its_constructor(connection: Connection) -> None:
    before = list(Order.built)
    frame = publish_frame(text(__name__) + text("Order") + b"\x93K\x01K\x02\x86R")

    assert f"REDUCE may not call {__name__}.Order" in refusal(connection, frame)
    assert Order.built == before


class _Imposter:
    """Claims to be the allowed `Order` on the sender's side, but reduces to another call."""

    def __init__(self, target: Any, args: tuple[Any, ...]) -> None:
        self._reduce = (target, args)

    def __reduce__(self) -> tuple[Any, ...]:
        return self._reduce


def test_a_reduce_that_calls_something_else_is_refused(connection: Connection, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    attacks = [
        _Imposter(os.system, (f"touch {marker}",)),
        _Imposter(copyreg._reconstructor, (Order, object, None)),  # type: ignore[attr-defined]
        _Imposter(object.__new__, (Order,)),
        _Imposter(getattr, (Order, "__init__")),
    ]

    reasons = [refusal(connection, encode(("publish", ("orders", a, None, None, None)))) for a in attacks]

    assert ["allow-list" in r for r in reasons] == [True] * len(attacks)
    assert "copyreg._reconstructor" in reasons[1] and "builtins.getattr" in reasons[3]
    assert not marker.exists()


def test_a_class_defined_differently_on_the_sender_builds_the_servers_class(
    bus: Bus, connection: Connection
) -> None:
    before = list(Order.built)
    subscription = bus.topic("orders").subscription(group="g")
    state = b"}(" + text("order_id") + b"K\x07" + text("amount") + text("lots") + b"u"
    frame = publish_frame(text(__name__) + text("Order") + b"\x93)\x81" + state + b"b")

    connection.send_bytes(framed(frame))
    assert connection.poll(10.0)
    status, _ = reply(connection)
    delivery = subscription.receive(timeout=5)
    delivery.ack()

    # NEWOBJ + BUILD fill the server's own class: nothing of the sender's code runs and
    # no constructor runs either; the fields hold what was sent (a str amount here).
    assert status == "ok"
    assert type(delivery.message) is Order and vars(delivery.message)["amount"] == "lots"
    assert Order.built == before


@pytest.mark.parametrize("frame", [
    b"\x80\x05K\x01K\x02s.",  # SETITEM on an int
    b"\x80\x05(K\x01\x90.",  # ADDITEMS with no set
    b"\x80\x05]K\x01e.",  # APPENDS with no mark
])
def test_structurally_impossible_frames_are_malformed(frame: bytes) -> None:
    with pytest.raises(FrameRefusedError):
        decode(frame, wire_types())


@pytest.mark.parametrize("protocol", [3, 4, 5])  # the wire writes 5; 0-2 spell bytes as calls
def test_plain_values_decode_in_protocols_3_to_5(protocol: int) -> None:
    value = [1, -1, 2**70, "é" * 2000, b"\x00" * 300, {"k": (1.5, None, True)}, [[], {}], ()]
    if protocol >= 4:
        value += [{1, (2, 3)}, frozenset({"a"}), ValueError("v")]
    if protocol == 5:
        value.append(bytearray(b"xy"))

    decoded = decode(pickle.dumps(value, protocol=protocol), wire_types())

    assert repr(decoded) == repr(value)


def test_a_refused_global_before_garbage_drops_the_sender(server: BusServer, connection: Connection) -> None:
    refused = b"csubprocess\nPopen\n(S'true'\ntR."

    assert_dropped_as_malformed(connection, refused[:-1] + b"\xff\xfe garbage, not opcodes")
    with pytest.raises(FrameRefusedError, match=r"subprocess\.Popen") as refusal_info:
        decode(refused, wire_types())
    assert not isinstance(refusal_info.value, MalformedFrameError)


def test_bytes_after_the_stop_opcode_are_malformed() -> None:
    with pytest.raises(MalformedFrameError, match="after the STOP"):
        decode(pickle.dumps(("ping", ())) + b"N.", wire_types())


@pytest.mark.parametrize("seed", range(5))
def test_random_frames_are_always_malformed(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        with pytest.raises(MalformedFrameError):
            decode(rng.randbytes(512), wire_types())
