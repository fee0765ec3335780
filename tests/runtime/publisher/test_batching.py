"""Batch accumulation: exact count, byte and latency thresholds, driven by a fake clock."""

from __future__ import annotations

import pickle
from concurrent.futures import Future

import pytest

from runtime.core._message import Message
from runtime.errors import PublishError
from runtime.publisher._batching import Batch, Batcher, BatchSettings


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def add(batcher: Batcher, size: int, key: str | None = None) -> list[Batch]:
    return add_message(batcher, key, Message(data=b"x" * size, ordering_key=key))


def add_message(batcher: Batcher, key: str | None, message: Message) -> list[Batch]:
    """One message into its lane, as the Publisher adds a burst (`Batcher.add`)."""
    run = ([message.data], message.attributes, message.ordering_key, Future(), 0, [message.size])
    return batcher.add(key, [run])


def sizes(batch: Batch) -> list[int]:
    return [len(data) for data in batch.datas]


def test_defaults_match_the_contract() -> None:
    settings = BatchSettings()

    assert (settings.max_messages, settings.max_bytes, settings.max_latency) == (
        100, 1024 * 1024, 0.010
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_messages", 0), ("max_messages", 1.5), ("max_messages", True),
        ("max_bytes", 0), ("max_bytes", -1), ("max_bytes", "1"),
        ("max_latency", -0.001), ("max_latency", float("nan")), ("max_latency", "0.1"),
    ],
)
def test_invalid_settings_raise_code_3_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(PublishError) as caught:
        BatchSettings(**{field: value})  # type: ignore[arg-type]

    assert caught.value.code == 3
    assert field in str(caught.value)
    assert pickle.loads(pickle.dumps(caught.value)).code == 3


def test_nth_message_closes_the_batch_exactly() -> None:
    batcher = Batcher(BatchSettings(max_messages=10, max_latency=60.0), clock=FakeClock())

    closed = [add(batcher, 1) for _ in range(11)]

    assert all(c == [] for c in closed[:9])
    assert [len(b) for b in closed[9]] == [10]
    assert closed[10] == []
    assert len(batcher) == 1


def test_byte_threshold_reached_exactly_closes_at_once() -> None:
    batcher = Batcher(BatchSettings(max_bytes=1024, max_latency=60.0), clock=FakeClock())

    first, second, third = add(batcher, 512), add(batcher, 512), add(batcher, 512)

    assert first == []
    assert [sizes(b) for b in second] == [[512, 512]]
    assert third == []
    assert [sizes(b) for b in batcher.drain()] == [[512]]


def test_message_that_would_exceed_bytes_sends_the_pending_batch_first() -> None:
    batcher = Batcher(BatchSettings(max_bytes=1024, max_latency=60.0), clock=FakeClock())
    add(batcher, 600)

    closed = add(batcher, 500)

    assert [sizes(b) for b in closed] == [[600]]
    assert [sizes(b) for b in batcher.drain()] == [[500]]


def test_lone_message_above_max_bytes_goes_alone() -> None:
    batcher = Batcher(BatchSettings(max_bytes=1024, max_latency=60.0), clock=FakeClock())
    add(batcher, 10)

    closed = add(batcher, 5000)

    assert [sizes(b) for b in closed] == [[10], [5000]]
    assert len(batcher) == 0


def test_size_counts_utf8_attributes() -> None:
    batcher = Batcher(BatchSettings(max_bytes=10, max_latency=60.0), clock=FakeClock())
    message = Message(data=b"ab", attributes={"é": "xyz"})

    closed = add_message(batcher, None, message)

    assert message.size == 2 + 2 + 3
    assert closed == []
    assert batcher.drain()[0].size == 7


def test_all_thresholds_minimal_means_no_batching() -> None:
    batcher = Batcher(BatchSettings(max_messages=1, max_bytes=1, max_latency=0), clock=FakeClock())

    closed = [add(batcher, 0) for _ in range(3)]

    assert [[len(b) for b in c] for c in closed] == [[1], [1], [1]]


def test_zero_latency_sends_every_message_at_once() -> None:
    batcher = Batcher(BatchSettings(max_latency=0), clock=FakeClock())

    assert [len(b) for b in add(batcher, 5)] == [1]


def test_latency_closes_batches_oldest_first_when_due() -> None:
    clock = FakeClock()
    batcher = Batcher(BatchSettings(max_messages=1000, max_latency=0.020), clock=clock)
    add(batcher, 1, key="a")
    clock.now += 0.005
    add(batcher, 1, key="b")

    clock.now += 0.0149
    not_yet = batcher.due()
    clock.now += 0.0001
    first = batcher.due()
    clock.now += 0.005
    second = batcher.due()

    assert not_yet == []
    assert [b.key for b in first] == ["a"]
    assert [b.key for b in second] == ["b"]


def test_next_deadline_is_the_oldest_open_batch_plus_latency() -> None:
    clock = FakeClock()
    batcher = Batcher(BatchSettings(max_latency=0.5), clock=clock)
    assert batcher.next_deadline() is None

    add(batcher, 1, key="a")
    clock.now += 0.2
    add(batcher, 1, key="b")

    assert batcher.next_deadline() == pytest.approx(100.5)


def test_lanes_batch_separately_and_ids_increase() -> None:
    batcher = Batcher(BatchSettings(max_latency=60.0), clock=FakeClock())
    for key in ["A", "B", "A", None]:
        add(batcher, 1, key=key)

    batches = batcher.drain()

    assert [(b.key, len(b)) for b in batches] == [("A", 2), ("B", 1), (None, 1)]
    assert [b.id for b in batches] == [1, 2, 3]
    assert batcher.last_id == 3


def test_take_removes_one_lane() -> None:
    batcher = Batcher(BatchSettings(max_latency=60.0), clock=FakeClock())
    add(batcher, 1, key="A")
    add(batcher, 1, key="B")

    taken = batcher.take("A")

    assert taken is not None and taken.key == "A"
    assert [b.key for b in batcher.drain()] == ["B"]
    assert batcher.take("A") is None


def test_update_closes_batches_that_now_reach_a_threshold() -> None:
    batcher = Batcher(BatchSettings(max_latency=60.0), clock=FakeClock())
    for _ in range(3):
        add(batcher, 1, key="A")
    add(batcher, 1, key="B")

    full = batcher.update(BatchSettings(max_messages=2, max_latency=60.0))

    assert [(b.key, len(b)) for b in full] == [("A", 3)]
    assert batcher.settings.max_messages == 2
    assert [b.key for b in batcher.drain()] == ["B"]


def _one_at_a_time(settings: BatchSettings, message_sizes: list[int]) -> list[list[int]]:
    batcher = Batcher(settings, clock=FakeClock())
    closed: list[Batch] = []
    for size in message_sizes:
        closed += add(batcher, size)
    return [sizes(batch) for batch in closed + batcher.drain()]


@pytest.mark.parametrize(("message_sizes", "expected"), [
    ([5, 5, 5], [[5, 5], [5]]),  # a batch reaching max_bytes exactly closes at once
    ([4, 4, 4], [[4, 4], [4]]),  # the third would overflow: the open batch goes first
    ([3, 30, 3], [[3], [30], [3]]),  # a lone message above max_bytes goes alone
    ([0, 0, 0, 0, 0, 0, 0], [[0, 0, 0], [0, 0, 0], [0]]),  # only the count closes these
])
def test_byte_threshold_edges(message_sizes: list[int], expected: list[list[int]]) -> None:
    settings = BatchSettings(max_messages=3, max_bytes=10)

    assert _one_at_a_time(settings, message_sizes) == expected


def test_a_run_is_cut_into_batches_that_keep_their_slices_of_it() -> None:
    batcher = Batcher(BatchSettings(max_messages=2), clock=FakeClock())
    sink: Future[str] = Future()
    run = ([bytes([i]) for i in range(5)], {"i": "v"}, None, sink, 10, [1] * 5)

    closed = batcher.add(None, [run])

    assert [batch.datas for batch in closed] == [[b"\x00", b"\x01"], [b"\x02", b"\x03"]]
    assert [batch.slices for batch in closed] == [[(sink, 10, 2)], [(sink, 12, 2)]]
    assert closed[1].attributes == [{"i": "v"}] * 2
    assert batcher.drain()[0].slices == [(sink, 14, 1)]


def test_runs_share_a_batch_each_with_its_own_slice() -> None:
    batcher = Batcher(BatchSettings(max_messages=4), clock=FakeClock())
    first: Future[str] = Future()
    second: Future[str] = Future()

    closed = batcher.add("k", [([b"a"], {}, "k", first, 0, [1]),
                               ([b"b", b"c", b"d", b"e"], {}, "k", second, 0, [1] * 4)])

    assert [batch.datas for batch in closed] == [[b"a", b"b", b"c", b"d"]]
    assert closed[0].slices == [(first, 0, 1), (second, 0, 3)] and closed[0].keys == ["k"] * 4
    assert batcher.drain()[0].slices == [(second, 3, 1)]


def test_the_unkeyed_lane_keeps_each_message_s_own_ordering_key() -> None:
    batcher = Batcher(BatchSettings(max_messages=3), clock=FakeClock())
    futures: list[Future[str]] = [Future() for _ in range(3)]

    closed = batcher.add(None, [([b"a"], {}, "k1", [futures[0]], 0, [1]),
                                ([b"b", b"c"], {}, "k2", futures[1:], 0, [1, 1])])

    assert [batch.keys for batch in closed] == [["k1", "k2", "k2"]]
