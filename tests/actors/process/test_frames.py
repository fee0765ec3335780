"""Frames to a child: bounded sends on a real socket pair, and a child that stops reading."""

from __future__ import annotations

import os
import threading
import time
from multiprocessing import Pipe
from typing import Any

import pytest

from actors import Actor, ActorSystem, Event
from actors.errors import WorkerCrashedError
from actors.process import _wire as wire
from actors.process._channel import FrameStalled, send_frame
from actors.process._wire import ExitCode


@pytest.mark.parametrize("size", [0, 10, 65535, 65536, 3 * 1024 * 1024])
def test_a_frame_arrives_whole_for_recv_bytes(size: int) -> None:
    parent, child = Pipe(duplex=True)
    data = os.urandom(size)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(child.recv_bytes()))
    reader.start()

    send_frame(parent, data, stall_timeout=10.0)
    reader.join(10)

    assert received == [data]
    parent.close()
    child.close()


def test_frames_keep_their_order_and_boundaries() -> None:
    parent, child = Pipe(duplex=True)
    frames = [os.urandom(n) for n in (1, 70_000, 5, 200_000, 0, 3)]
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.extend(child.recv_bytes() for _ in frames))
    reader.start()

    for frame in frames:
        send_frame(parent, frame, stall_timeout=10.0)
    reader.join(10)

    assert received == frames
    parent.close()
    child.close()


def test_a_peer_that_stops_reading_stalls_the_send_within_its_bound() -> None:
    parent, child = Pipe(duplex=True)  # nobody reads ``child``
    began = time.monotonic()

    with pytest.raises(FrameStalled):
        send_frame(parent, b"x" * (16 * 1024 * 1024), stall_timeout=0.3)
    waited = time.monotonic() - began

    assert 0.3 <= waited < 5.0
    parent.close()
    child.close()


def test_a_closed_peer_fails_the_send_at_once() -> None:
    parent, child = Pipe(duplex=True)
    child.close()

    with pytest.raises(OSError) as caught:
        send_frame(parent, b"x" * 1024, stall_timeout=10.0)

    assert not isinstance(caught.value, FrameStalled)
    parent.close()


class Pid(Actor):
    def on_receive(self, message: Any) -> Any:
        return os.getpid()


@pytest.fixture(params=["forkserver", "spawn"])
def system(request: pytest.FixtureRequest) -> Any:
    with ActorSystem("frames", start_method=request.param) as system:
        yield system


def test_a_child_whose_mail_reader_fails_exits_and_is_replaced(system: ActorSystem) -> None:
    restarted = threading.Event()
    failures: list[BaseException | None] = []

    def watch(event: Event) -> None:
        if event.kind == "failed":
            failures.append(event.error)
        if event.kind == "restarted":
            restarted.set()

    system.events.subscribe(watch)
    ref = system.spawn(Pid, name="reader", process=True)
    pid = ref.ask("pid").result(10)
    channel = system._kernel.cells["reader"]._live  # the parent's end of its pipe

    channel.conn.send_bytes(b"not a pickle")  # the child's reader cannot decode this

    assert restarted.wait(10)
    assert ref.ask("pid").result(10) not in (pid, os.getpid())
    assert len(failures) == 1 and isinstance(failures[0], WorkerCrashedError)
    assert failures[0].args[1] == ExitCode.READER_FAILED


def _hold_without_reading(conn: Any, seconds: float) -> None:
    """A child that keeps its end of the pipe open and never reads it."""
    time.sleep(seconds)  # sleep-ok: the child must merely stay alive, not reading


def test_a_channel_whose_child_stops_reading_kills_it_instead_of_hanging() -> None:
    import multiprocessing

    from actors.process._channel import Channel

    context = multiprocessing.get_context("forkserver")
    parent_conn, child_conn = context.Pipe(duplex=True)
    process = context.Process(target=_hold_without_reading, args=(child_conn, 60.0))
    process.start()
    child_conn.close()
    channel = Channel(process, parent_conn, threading.Lock(), stall_timeout=0.3)
    channel.enqueue(wire.TELL, None, b"x" * (16 * 1024 * 1024), None)

    began = time.monotonic()
    channel.flush()
    process.join(10)

    assert time.monotonic() - began < 10
    assert channel.broken
    assert process.exitcode == -9  # killed, as a stuck child is
    parent_conn.close()
