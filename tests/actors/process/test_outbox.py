"""The reports a process actor's process sends its parent: few frames, none held long."""

from __future__ import annotations

import threading
from typing import Any

from actors.process import _wire as wire
from actors.process._outbox import FLUSH_EVERY, HOLD, Outbox


class _Frames:
    """A send that records each frame and signals the first."""

    def __init__(self) -> None:
        self.frames: list[list[Any]] = []
        self.sent = threading.Event()

    def __call__(self, items: list[Any]) -> None:
        self.frames.append(items)
        self.sent.set()


def test_a_flush_sends_every_waiting_report_in_order_then_the_tells_done() -> None:
    frames = _Frames()
    outbox = Outbox(frames)
    outbox.add(("reply", 1))
    outbox.told(7)
    outbox.add(("reply", 2))

    outbox.flush()
    outbox.flush()  # nothing waits: no frame

    assert frames.frames == [[("reply", 1), ("reply", 2), (wire.DONE, 7)]]
    assert not outbox.waiting


def test_reports_wait_for_company_only_behind_short_messages() -> None:
    now = [100.0]
    outbox = Outbox(_Frames(), clock=lambda: now[0])
    outbox.add(("reply", 1))

    short = outbox.due(started=100.0)
    long = outbox.due(started=100.0 - 2 * HOLD)
    for seq in range(2, FLUSH_EVERY + 1):
        outbox.add(("reply", seq))
    full = outbox.due(started=100.0)

    assert (short, long, full) == (False, True, True)


def test_replies_wait_behind_short_messages_for_hold_at_most_tells_done_longer() -> None:
    now = [100.0]
    replies, tells = (Outbox(_Frames(), clock=lambda: now[0]) for _ in range(2))
    replies.add(("reply", 1))
    tells.told(7)

    now[0] += 2 * HOLD  # a flood of short messages went on meanwhile

    assert replies.due(started=now[0]) and not tells.due(started=now[0])


def test_the_flusher_sends_what_waits_once_armed_and_stops_when_closed() -> None:
    frames = _Frames()
    outbox = Outbox(frames)
    flusher = threading.Thread(target=outbox.run_flusher, name="flusher")
    flusher.start()
    try:
        outbox.add(("reply", 1))
        outbox.arm()  # the serving loop starts a message while the reply waits

        assert frames.sent.wait(10)
        assert frames.frames == [[("reply", 1)]]
        assert not outbox.armed and not outbox.waiting
    finally:
        outbox.close()
        flusher.join(10)
    assert not flusher.is_alive()
