"""The lease log: replayable ranges, cumulative acks, heartbeats and expiry (fake group)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.broker.lease._log import EXPIRED_REASON, LeaseLog
from runtime.broker.lease._record import PayloadError, encode_payload
from runtime.core._message import Message
from runtime.errors import SettlementError


@dataclass
class FakeDelivery:
    message: Any
    message_id: str
    key: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    attempt: int = 1
    state: str = "pending"
    reason: str | None = None

    def ack(self) -> None:
        self._settle("acked")

    def nack(self, reason: str = "nack") -> None:
        self._settle("nacked")
        self.reason = reason

    def _fail_if_pending(self, reason: str, error: str | None) -> None:
        if self.state == "pending":
            self._settle("nacked")
            self.reason = reason

    def _settle(self, state: str) -> None:
        if self.state != "pending":
            raise SettlementError(self.message_id, self.state)
        self.state = state


class FakeGroup:
    """A balanced group with one queue; `subscribe` makes a member pulling from it."""

    def __init__(self) -> None:
        self.queue: deque[FakeDelivery] = deque()
        self.members = 0
        self.rejected: list[tuple[str, str]] = []
        self.extended: list[int] = []

    def publish(self, *messages: Any) -> list[FakeDelivery]:
        out = [FakeDelivery(m, f"m{len(self.queue) + i}") for i, m in enumerate(messages)]
        self.queue.extend(out)
        return out

    def subscribe(self) -> FakeGroup.Member:
        self.members += 1
        return FakeGroup.Member(self)

    def reject(self, delivery: Any, error: str) -> None:
        self.rejected.append((delivery.message_id, error))

    class Member:
        def __init__(self, group: FakeGroup) -> None:
            self.group = group

        def receive_many(self, max_messages: int, timeout: float | None = None) -> list[FakeDelivery]:
            queue = self.group.queue
            if not queue:
                raise TimeoutError()
            return [queue.popleft() for _ in range(min(max_messages, len(queue)))]

        def extend(self, deliveries: Any) -> int:
            self.group.extended.append(len(deliveries))
            return len(deliveries)

        def unsubscribe(self) -> None:
            self.group.members -= 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def group() -> FakeGroup:
    return FakeGroup()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_log(group: FakeGroup, clock: FakeClock, lease_seconds: float = 10.0) -> LeaseLog:
    return LeaseLog(subscribe=group.subscribe, reject=group.reject,
                    lease_seconds=lease_seconds, clock=clock)


def test_latest_leases_at_most_max_rows(group: FakeGroup, clock: FakeClock) -> None:
    group.publish(*[b"x"] * 10)
    log = make_log(group, clock)

    first = log.latest(0, 4)
    second = log.latest(4, 4)
    third = log.latest(8, 4)
    idle = log.latest(10, 4)

    assert (first, second, third, idle) == (4, 8, 10, 10)
    assert len(group.queue) == 0


def test_fetch_replays_the_same_range(group: FakeGroup, clock: FakeClock) -> None:
    group.publish(b"a", b"b", b"c", b"d")
    log = make_log(group, clock)
    log.latest(0, 4)

    once = log.fetch(1, 3)
    again = log.fetch(1, 3)

    assert [r.payload for r in once] == [b"b", b"c"]
    assert once == again


def test_a_bounded_fetch_stops_after_the_record_passing_the_budget(
    group: FakeGroup, clock: FakeClock
) -> None:
    group.publish(b"aa", b"bbb", b"cccc", b"d", b"e")
    log = make_log(group, clock)
    log.latest(0, 5)
    log.ack(1)  # offsets stay where they were: the log's base moves to 1

    cut, end = log.fetch_bounded(1, 5, max_bytes=5)
    whole, whole_end = log.fetch_bounded(1, 5, max_bytes=100)

    assert (cut.payload, end) == ([b"bbb", b"cccc"], 3)
    assert (whole.payload, whole_end) == ([b"bbb", b"cccc", b"d", b"e"], 5)
    rest, rest_end = log.fetch_bounded(end, 5, max_bytes=5)
    assert (rest.records(), rest_end) == (whole.records()[2:], 5)


def test_ack_is_cumulative_and_settles_only_below_offset(group: FakeGroup, clock: FakeClock) -> None:
    deliveries = group.publish(*[b"x"] * 5)
    log = make_log(group, clock)
    log.latest(0, 5)

    position, _ = log.ack(3)
    again, _ = log.ack(2)

    assert position == 3 and again == 3
    assert [d.state for d in deliveries] == ["acked"] * 3 + ["pending"] * 2
    assert log.fetch(0, 5) == log.fetch(3, 5)
    assert len(log.fetch(0, 5)) == 2


def test_position_survives_for_the_same_consumer(group: FakeGroup, clock: FakeClock) -> None:
    group.publish(*[b"x"] * 6)
    log = make_log(group, clock)
    log.latest(0, 6)
    log.ack(4)

    start = log.position()

    assert start == 4
    assert [r.message_id for r in log.fetch(start, log.latest(start, 10))] == ["m4", "m5"]


def test_lease_expires_without_heartbeat_and_returns_messages(group: FakeGroup, clock: FakeClock) -> None:
    deliveries = group.publish(*[b"x"] * 3)
    log = make_log(group, clock, lease_seconds=10.0)
    log.latest(0, 3)
    log.ack(1)

    clock.now += 9.0
    early = log.expire()
    log.heartbeat()
    clock.now += 9.0
    still = log.expire()
    clock.now += 2.0
    released = log.expire()

    assert (early, still, released) == (0, 0, 2)
    assert [d.state for d in deliveries] == ["acked", "nacked", "nacked"]
    assert deliveries[1].reason == EXPIRED_REASON
    assert group.members == 0


def test_released_offsets_are_never_reused(group: FakeGroup, clock: FakeClock) -> None:
    group.publish(b"a", b"b")
    log = make_log(group, clock, lease_seconds=1.0)
    log.latest(0, 2)
    clock.now += 2.0
    log.expire()
    group.publish(b"c")

    position = log.position()
    end = log.latest(position, 10)

    assert (position, end) == (2, 3)
    assert log.fetch(0, 2) == []
    assert [r.payload for r in log.fetch(2, 3)] == [b"c"]
    assert group.members == 1


def test_a_checkpoint_ahead_of_the_log_returns_held_records(group: FakeGroup, clock: FakeClock) -> None:
    deliveries = group.publish(b"a", b"b")
    log = make_log(group, clock)
    log.latest(0, 1)

    end = log.latest(50, 10)

    assert end == 51
    assert deliveries[0].state == "nacked"
    assert [r.payload for r in log.fetch(50, 51)] == [b"b"]


def test_unencodable_message_is_rejected_not_leased(group: FakeGroup, clock: FakeClock) -> None:
    group.publish(b"a", object(), "text")
    log = make_log(group, clock)

    end = log.latest(0, 3)

    assert end == 2
    assert [r.payload for r in log.fetch(0, 2)] == [b"a", b"text"]
    assert [mid for mid, _ in group.rejected] == ["m1"]
    assert "cannot encode" in group.rejected[0][1]


def test_ack_reports_deliveries_settled_elsewhere(group: FakeGroup, clock: FakeClock) -> None:
    deliveries = group.publish(b"a", b"b")
    log = make_log(group, clock)
    log.latest(0, 2)
    deliveries[0].nack("timeout")

    position, late = log.ack(2)

    assert (position, late) == (2, 1)
    assert deliveries[1].state == "acked"


def test_an_ack_ahead_of_a_fresh_log_acks_nothing(group: FakeGroup, clock: FakeClock) -> None:
    # A restarted broker: the checkpoint says 1000, the new log holds offsets from 0.
    deliveries = group.publish(*[b"x"] * 3)
    log = make_log(group, clock)

    position, late = log.ack(1000)
    end = log.advance(1000)

    assert (position, late, end) == (0, 0, 1000)
    assert [d.state for d in deliveries] == ["pending"] * 3
    assert log.latest(1000, 10) == 1003


def test_missing_counts_offsets_neither_held_nor_released(group: FakeGroup, clock: FakeClock) -> None:
    group.publish(*[b"x"] * 6)
    log = make_log(group, clock, lease_seconds=1.0)
    log.latest(0, 2)
    log.ack(2)  # [0, 2) acked
    log.latest(2, 2)
    clock.now += 2.0
    log.expire()  # [2, 4) released to the group
    log.latest(4, 2)  # [4, 6) held

    assert log.missing(2, 6) == 0
    assert log.missing(0, 6) == 2
    assert log.missing(4, 9) == 3
    assert log.missing(5, 5) == 0


def test_close_returns_everything(group: FakeGroup, clock: FakeClock) -> None:
    deliveries = group.publish(b"a", b"b")
    log = make_log(group, clock)
    log.latest(0, 2)

    released = log.close()

    assert released == 2
    assert {d.state for d in deliveries} == {"nacked"}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (b"raw", b"raw"),
        ("text", b"text"),
        (Message(data=b"data"), b"data"),
        ({"a": [1, 2]}, b'{"a":[1,2]}'),
        (7, b"7"),
    ],
)
def test_payload_encoding(message: object, expected: bytes) -> None:
    assert encode_payload(message) == expected


def test_payload_encoding_refuses_non_json() -> None:
    with pytest.raises(PayloadError):
        encode_payload({1, 2})


def test_ack_hands_the_acked_range_to_ack_many_at_once(group: FakeGroup, clock: FakeClock) -> None:
    deliveries = group.publish(*[b"x"] * 5)
    calls: list[list[str]] = []
    log = LeaseLog(subscribe=group.subscribe, reject=group.reject, lease_seconds=10.0,
                   ack_many=lambda done: calls.append([d.message_id for d in done]), clock=clock)
    log.latest(0, 5)

    log.ack(3)
    log.ack(3)
    log.ack(5)

    assert calls == [["m0", "m1", "m2"], ["m3", "m4"]]
    assert [d.state for d in deliveries] == ["pending"] * 5  # ack_many decides how to settle


def test_ack_range_settles_one_range_and_moves_over_acked_heads(
    group: FakeGroup, clock: FakeClock
) -> None:
    deliveries = group.publish(*[b"x"] * 6)
    log = make_log(group, clock)
    log.latest(0, 6)

    log.ack_range(2, 4)
    middle = log.position()
    log.ack_range(0, 2)

    assert [d.state for d in deliveries] == ["acked"] * 4 + ["pending"] * 2
    assert (middle, log.position()) == (0, 4)
    assert [r.message_id for r in log.fetch(0, 6)] == ["m4", "m5"]
    assert log.close() == 2


@given(sizes=st.lists(st.sampled_from([0, 1, 5, 100]), max_size=60),
       bounds=st.tuples(st.integers(0, 60), st.integers(0, 60)),
       max_bytes=st.integers(1, 1_000), window=st.sampled_from([1, 3, 16, 65_536]))
def test_a_fetch_is_cut_after_the_row_that_passes_its_byte_budget(
    sizes: list[int], bounds: tuple[int, int], max_bytes: int, window: int,
) -> None:
    from runtime.broker.lease import _ranges

    payloads = [b"x" * size for size in sizes]
    first, last = sorted(min(b, len(sizes)) for b in bounds)
    expected, total = last, 0  # the plain loop: the first row whose running total passes
    for row in range(first, last):
        total += sizes[row]
        if total >= max_bytes:
            expected = row + 1
            break
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_ranges, "CUT_WINDOW", window)
        assert _ranges.cut(payloads, first, last, max_bytes) == expected
