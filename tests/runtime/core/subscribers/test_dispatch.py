"""Balanced dispatch: fewest unsettled first, small prefetch, natural batching (issue 13)."""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.groups import FakeEndpoint, bare_group, publish_chunk
from support.reliability import append_line, read_lines

from runtime import Bus, Delivery
from runtime.core.subscribers._gate import ARRIVED
from runtime.errors import InvalidSettingsError, WouldBlock


def _slow_recorder(directory: str, seconds: float) -> Any:
    def handler(delivery: Delivery[int]) -> None:
        # The hand-over's size: the deliveries still pending when its first one starts.
        size = len(delivery._handover.pending) if delivery._index == 0 else 0
        append_line(directory, f"{os.getpid()} {delivery.message} {size}")
        time.sleep(seconds)  # sleep-ok: simulates a slow handler
        delivery.ack()

    return handler


def _per_worker(lines: list[str]) -> dict[str, list[int]]:
    handled: dict[str, list[int]] = collections.defaultdict(list)
    for line in lines:
        pid, message, _ = line.split()
        handled[pid].append(int(message))
    return handled


def _sizes(lines: list[str]) -> list[int]:
    return [int(line.split()[2]) for line in lines if int(line.split()[2])]


def test_a_trickle_of_slow_messages_spreads_over_every_worker(tmp_path: Path) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(_slow_recorder(str(tmp_path), 0.02), group="g", workers=2, auto_ack=False)

        for n in range(40):
            topic.publish(n)
        assert topic.join(timeout=30)

    handled = _per_worker(read_lines(tmp_path))
    assert sorted(m for ms in handled.values() for m in ms) == list(range(40))
    assert len(handled) == 2
    assert min(len(ms) for ms in handled.values()) >= 12


def test_a_burst_to_busy_workers_is_batched_and_a_lone_message_goes_alone(tmp_path: Path) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(_slow_recorder(str(tmp_path), 0.02), group="g", workers=2)

        for n in range(60):
            topic.publish(n)
        assert topic.join(timeout=30)
        burst = _sizes(read_lines(tmp_path))
        for path in tmp_path.iterdir():
            path.unlink()
        topic.publish(1000)
        assert topic.join(timeout=10)
        lone = _sizes(read_lines(tmp_path))

    assert max(burst) > 1 and sum(burst) == 60
    assert lone == [1]


def _stuck_member(topic: Any, release: threading.Event, prefetch: int | None) -> threading.Event:
    entered = threading.Event()

    def handler(delivery: Delivery[int]) -> None:
        entered.set()
        release.wait(timeout=30)
        delivery.ack()

    topic.subscribe(handler, group="g", prefetch=prefetch)
    return entered


def _publishes_until_blocked(topic: Any, limit: int) -> tuple[int, WouldBlock | None]:
    for n in range(limit):
        try:
            topic.publish(n, timeout=2.0)
        except WouldBlock as exc:
            return n, exc
    return limit, None


def test_capacity_plus_prefetch_bounds_what_a_stuck_member_lets_through() -> None:
    release = threading.Event()
    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=1, ack_timeout=None)
        entered = _stuck_member(topic, release, prefetch=2)

        accepted, error = _publishes_until_blocked(topic, 60)
        assert entered.wait(timeout=5)
        release.set()
        assert topic.join(timeout=10)

    assert accepted in (3, 4)
    assert error is not None and "'g'" in str(error)


def test_the_default_thread_prefetch_is_small() -> None:
    release = threading.Event()
    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=1, ack_timeout=None)
        _stuck_member(topic, release, prefetch=None)

        accepted, error = _publishes_until_blocked(topic, 60)
        release.set()
        assert topic.join(timeout=10)

    assert error is not None
    assert accepted < 35


def test_thread_members_share_a_trickle_of_slow_messages() -> None:
    seen: dict[int, int] = collections.Counter()

    def member(name: int) -> Any:
        def handler(delivery: Delivery[int]) -> None:
            seen[name] += 1
            time.sleep(0.005)  # sleep-ok: simulates a slow handler
            delivery.ack()

        return handler

    with Bus() as bus:
        topic = bus.create_topic("t")
        for name in range(3):
            topic.subscribe(member(name), group="g")
        for n in range(60):
            topic.publish(n)
        assert topic.join(timeout=30)

    assert sum(seen.values()) == 60
    assert min(seen[name] for name in range(3)) >= 12


@pytest.mark.parametrize("prefetch", [0, -1, 1.5, True, "2"])
def test_a_bad_prefetch_is_refused(prefetch: Any) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")

        with pytest.raises(InvalidSettingsError, match="prefetch"):
            topic.subscribe(lambda d: d.ack(), group="g", prefetch=prefetch)


class _Recorder(FakeEndpoint):
    """A group endpoint that records the messages it is handed."""

    def __init__(self, key: int, window: int = 32) -> None:
        super().__init__(key, window)
        self.got: list[list[Any]] = []

    def push(self, handover: Any, deliveries: list[Any]) -> None:
        self.got.append([d.message for d in deliveries])


def _bare_group(*members: _Recorder) -> tuple[Any, Any]:
    from runtime.core.settlement._dead_letters import DeadLetterQueue
    from runtime.core.settlement._ledger import Ledger
    from runtime.core.subscribers._group_mail import Join

    letters = DeadLetterQueue()
    group = bare_group(Ledger(topic="t", ack_timeout=None, max_attempts=1, dead_letters=letters))
    for member in members:
        group.on_receive(Join(member))
    return group, letters


def test_a_chunk_with_an_unhashable_key_is_dead_lettered_whole_and_the_group_serves_on() -> None:
    first, second = _Recorder(1), _Recorder(2)
    group, letters = _bare_group(first, second)
    bad = [(1, "1", "a", None, {}, "t", None), (2, "2", "b", ["x"], {}, "t", None)]  # type: ignore[list-item]

    publish_chunk(group, bad)
    publish_chunk(group, [(3, "3", "c", "k", {}, "t", None)])

    assert [(d.message_id, d.reason) for d in letters] == [("1", "dropped"), ("2", "dropped")]
    assert all("unhashable" in (d.error or "") for d in letters)
    assert first.got + second.got == [["c"]]


def _envelope(seq: int, key: Any) -> Any:
    return (seq, str(seq), f"m{seq}", key, {}, "t", None)


def _take_burst(group: Any, chunks: list[list[Any]]) -> None:
    """Chunks that arrived together (one-at-a-time publishes while the group was busy)."""
    for chunk in chunks:
        group._arrivals.put(chunk)
    group.on_receive(ARRIVED)


def test_a_burst_of_keyed_chunks_reaches_each_key_s_member_in_publish_order() -> None:
    first, second = _Recorder(1, window=64), _Recorder(2, window=64)
    group, letters = _bare_group(first, second)
    keys = [f"k{n % 5}" for n in range(40)]

    _take_burst(group, [[_envelope(n, key)] for n, key in enumerate(keys)])

    got = [m for batch in first.got + second.got for m in batch]
    assert sorted(got, key=lambda m: int(m[1:])) == [f"m{n}" for n in range(40)]
    for member in (first, second):  # a key lives on one member, in publish order
        mine = [m for batch in member.got for m in batch]
        for key in {keys[int(m[1:])] for m in mine}:
            own = [int(m[1:]) for m in mine if keys[int(m[1:])] == key]
            assert own == [n for n in range(40) if keys[n] == key]
    assert not list(letters)


def _sorting_group(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], _Recorder, _Recorder, Any]:
    """A bare group of two recorders, and the size of each chunk it sorts by key."""
    from runtime.core.subscribers import _group

    calls: list[int] = []
    sort = _group.sort_by_key
    monkeypatch.setattr(_group, "sort_by_key",
                        lambda envelopes, *rest: calls.append(len(envelopes)) or sort(envelopes, *rest))
    first, second = _Recorder(1, window=64), _Recorder(2, window=64)
    return calls, first, second, _bare_group(first, second)


def test_chunks_that_arrive_together_are_sorted_in_one_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls, first, second, (group, _) = _sorting_group(monkeypatch)

    _take_burst(group, [[_envelope(n, f"k{n % 3}")] for n in range(30)])
    _take_burst(group, [[_envelope(30, "k0")]])

    assert calls == [30, 1]
    assert sorted(m for b in first.got + second.got for m in b) == sorted(f"m{n}" for n in range(31))


def test_a_burst_with_an_unhashable_key_refuses_only_that_chunk() -> None:
    first, second = _Recorder(1, window=64), _Recorder(2, window=64)
    group, letters = _bare_group(first, second)
    chunks = [[_envelope(1, "a")], [_envelope(2, None), _envelope(3, ["x"])],
              [_envelope(4, "a")], [_envelope(5, None)]]

    _take_burst(group, chunks)

    assert [(d.message_id, d.reason) for d in letters] == [("2", "dropped"), ("3", "dropped")]
    assert all("unhashable" in (d.error or "") for d in letters)
    got = [m for batch in first.got + second.got for m in batch]
    assert sorted(got) == ["m1", "m4", "m5"]
    holder = first if "m1" in [m for b in first.got for m in b] else second
    assert [m for b in holder.got for m in b if m in ("m1", "m4")] == ["m1", "m4"]


def test_equal_loads_take_turns_and_the_least_loaded_member_goes_first() -> None:
    first, second = _Recorder(1), _Recorder(2)
    group, _ = _bare_group(first, second)

    for n in range(4):
        publish_chunk(group, [(n, str(n), n, None, {}, "t", None)])

    assert sorted([*first.got, *second.got]) == [[0], [1], [2], [3]]
    assert len(first.got) == len(second.got) == 2


class _Timed(_Recorder):
    """A worker-like recorder: two hand-overs in flight; ``done`` when it has finished
    what it holds, though it has not answered yet."""

    handovers = 2

    def __init__(self, key: int, done: bool) -> None:
        super().__init__(key, window=1000)
        self.done = done

    def left(self, unsettled: int) -> int:
        return 0 if self.done else unsettled


def test_a_backlog_goes_to_the_member_further_through_its_work() -> None:
    quick, unknown = _Timed(1, done=True), _Timed(2, done=False)
    group, _ = _bare_group(quick, unknown)
    publish_chunk(group, [(n, str(n), n, None, None, "t", None) for n in range(200)])

    # Neither has answered; quick's 100 are done by now, unknown's still count in full.
    publish_chunk(group, [(n, str(n), n, None, None, "t", None) for n in range(200, 300)])

    assert [len(batch) for batch in quick.got] == [100, 100]
    assert [len(batch) for batch in unknown.got] == [100]
    assert quick.got[1] == list(range(200, 300))


def test_chunks_without_keys_are_queued_unsorted_and_keep_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls, first, second, (group, letters) = _sorting_group(monkeypatch)

    for start in (0, 10, 20):  # a burst of unkeyed chunks, flagged as the fan-out does
        group._arrivals.put([_envelope(n, None) for n in range(start, start + 10)], False)
    group.on_receive(ARRIVED)
    unkeyed = [m for batch in first.got + second.got for m in batch]
    # Then a burst that mixes them with keyed chunks: sorted as one, keys routed.
    group._arrivals.put([_envelope(30, None)], False)
    group._arrivals.put([_envelope(31, "k1"), _envelope(32, "k1")], True)
    group.on_receive(ARRIVED)

    assert calls == [3]
    assert sorted(unkeyed, key=lambda m: int(m[1:])) == [f"m{n}" for n in range(30)]
    for member in (first, second):  # each member got its unkeyed share in publish order
        mine = [int(m[1:]) for batch in member.got for m in batch if m not in ("m31", "m32")]
        assert mine == sorted(mine)
    keyed = [[m for batch in member.got for m in batch if m in ("m31", "m32")]
             for member in (first, second)]
    assert sorted(keyed) == [[], ["m31", "m32"]]  # one key: one member, in order
    assert len([m for batch in first.got + second.got for m in batch]) == 33
    assert not list(letters)


def test_chunks_of_one_key_each_go_whole_to_their_key_s_member_unsorted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls, first, second, (group, letters) = _sorting_group(monkeypatch)
    keys = ["k0", "k1", "k2", "k3"]
    for start in range(0, 40, 10):  # an ordered Publisher's batches: one key each
        key = keys[start // 10 % 4]
        group._arrivals.put([_envelope(n, key) for n in range(start, start + 10)], key)
    group._arrivals.put([_envelope(40, None)], False)
    group.on_receive(ARRIVED)

    assert calls == []  # no key was read
    for member in (first, second):
        mine = [int(m[1:]) for batch in member.got for m in batch]
        for key in keys:  # a key lives on one member, in publish order
            own = [n for n in mine if n < 40 and keys[n // 10] == key]
            assert own in ([], list(range(keys.index(key) * 10, keys.index(key) * 10 + 10)))
    everything = sorted(int(m[1:]) for b in first.got + second.got for m in b)
    assert everything == list(range(41)) and not list(letters)


def test_a_burst_of_lone_unkeyed_publishes_waits_as_one_piece_and_leaves_in_order() -> None:
    from runtime.core.subscribers._group_mail import Join

    group, letters = _bare_group()  # no member yet: what arrives waits in the queue
    for n in range(50):  # flagged keyless, as the fan-out does
        group._arrivals.put([_envelope(n, None)], False)
    group.on_receive(ARRIVED)

    assert len(group._queue.pieces()) == 1 and len(group._queue) == 50
    member = _Recorder(1, window=64)
    group.on_receive(Join(member))
    assert member.got == [[f"m{n}" for n in range(50)]]
    assert not list(letters)
