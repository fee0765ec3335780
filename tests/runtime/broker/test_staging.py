"""Staged publishing: exactly once per (producer, batch), abort, expiry."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from runtime.broker._staging import StagingArea, StagingLimits, settled_together
from runtime.broker._wire import NotTransferableError


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """A topic that publishes what it is handed at once (``submit`` of a commit)."""

    def __init__(self) -> None:
        self.published: list[list[str]] = []

    def __call__(self, parts: list[list[str]]) -> tuple[Future[Any], int]:
        rows = [row for part in parts for row in part]
        self.published.append(rows)
        done: Future[Any] = Future()
        done.set_result(None)
        return done, len(rows)


class SlowTopic:
    """A topic that holds what it is handed until told to settle it."""

    def __init__(self) -> None:
        self.handed: list[list[str]] = []
        self.outcomes: list[Future[Any]] = []

    def __call__(self, parts: list[list[str]]) -> tuple[Future[Any], int]:
        self.handed.append([row for part in parts for row in part])
        self.outcomes.append(Future())
        return self.outcomes[-1], len(self.handed[-1])


def wait(outcome: Future[Any], rows: int, timeout: float = 5.0) -> None:
    outcome.result(timeout=timeout)


def no_wait(outcome: Future[Any], rows: int) -> None:
    wait(outcome, rows, timeout=0.0)


def commit(area: StagingArea[list[str]], producer: str, batch: str, parts: list[Any],
           submit: Any) -> bool:
    return area.commit(producer, batch, parts, submit, wait)


def test_commit_publishes_listed_parts_once() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "0", (0, 0), ["a", "b"])
    area.stage("q", "0", (1, 0), ["c"])

    first = commit(area, "q", "0", [(0, 0), (1, 0)], sink)
    second = commit(area, "q", "0", [(0, 0), (1, 0)], sink)

    assert (first, second) == (True, False)
    assert sink.published == [["a", "b", "c"]]
    assert area.staged() == 0


def test_only_successful_attempts_are_published() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "0", (0, 0), ["failed attempt"])
    area.stage("q", "0", (0, 1), ["retry"])

    commit(area, "q", "0", [(0, 1)], sink)

    assert sink.published == [["retry"]]


def test_restaging_a_part_replaces_it() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "1", 0, ["old"])
    area.stage("q", "1", 0, ["new"])

    commit(area, "q", "1", [0], sink)

    assert sink.published == [["new"]]


def test_stage_after_commit_is_refused() -> None:
    area: StagingArea[list[str]] = StagingArea()
    commit(area, "q", "2", [], Sink())

    accepted = area.stage("q", "2", 0, ["late"])

    assert accepted is False
    assert area.staged() == 0


def test_a_submit_that_raised_keeps_the_stage_for_a_retry() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "3", 0, ["x"])

    def broken(parts: list[list[str]]) -> tuple[Future[Any], int]:
        raise RuntimeError("topic closed")  # nothing handed over

    with pytest.raises(RuntimeError):
        commit(area, "q", "3", [0], broken)
    retried = commit(area, "q", "3", [0], sink)

    assert retried is True
    assert sink.published == [["x"]]


def test_abort_drops_the_batch() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "4", 0, ["x"])
    area.stage("q", "4", 1, ["y"])

    dropped = area.abort("q", "4")
    commit(area, "q", "4", [0, 1], sink)

    assert dropped == 2
    assert sink.published == [[]]


def test_producers_are_independent() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("a", "0", 0, ["from a"])
    area.stage("b", "0", 0, ["from b"])

    commit(area, "a", "0", [0], sink)
    commit(area, "b", "0", [0], sink)

    assert sink.published == [["from a"], ["from b"]]


def test_orphaned_stages_expire() -> None:
    clock = FakeClock()
    area: StagingArea[list[str]] = StagingArea(ttl=60.0, clock=clock)
    area.stage("q", "old", 0, ["x"])
    clock.now = 30.0
    area.stage("q", "new", 0, ["y"])

    clock.now = 61.0
    expired = area.expire()

    assert expired == 1
    assert area.staged() == 1


def test_committed_ids_are_remembered_within_the_window() -> None:
    area: StagingArea[list[str]] = StagingArea(remember=2)
    for batch in ("0", "1", "2"):
        commit(area, "q", batch, [], Sink())

    assert not area.is_committed("q", "0")
    assert area.is_committed("q", "1") and area.is_committed("q", "2")


def test_a_commit_that_timed_out_is_never_handed_over_again() -> None:
    area: StagingArea[list[str]] = StagingArea()
    topic = SlowTopic()
    area.stage("q", "5", 0, ["a", "b"])

    with pytest.raises(TimeoutError):
        area.commit("q", "5", [0], topic, no_wait)
    staged_meanwhile = area.stage("q", "5", 1, ["late"])
    aborted = area.abort("q", "5")
    with pytest.raises(TimeoutError):
        area.commit("q", "5", [0], topic, no_wait)
    topic.outcomes[0].set_result(None)  # the backpressure eased: the topic published them
    retried = area.commit("q", "5", [0], topic, no_wait)
    again = area.commit("q", "5", [0], topic, no_wait)

    assert topic.handed == [["a", "b"]]
    assert (staged_meanwhile, aborted, retried, again) == (False, 0, False, False)
    assert area.is_committed("q", "5") and area.staged() == 0


def test_a_waiting_retry_reports_the_first_commit_s_outcome() -> None:
    area: StagingArea[list[str]] = StagingArea()
    topic = SlowTopic()
    area.stage("q", "6", 0, ["a"])
    with pytest.raises(TimeoutError):
        area.commit("q", "6", [0], topic, no_wait)

    def settle_then_wait(outcome: Future[Any], rows: int) -> None:
        topic.outcomes[0].set_result(None)
        wait(outcome, rows)

    retried = area.commit("q", "6", [0], topic, settle_then_wait)

    assert retried is True
    assert topic.handed == [["a"]]


def test_a_batch_whose_rows_failed_reports_that_error_on_every_retry() -> None:
    area: StagingArea[list[str]] = StagingArea()
    topic = SlowTopic()
    area.stage("q", "7", 0, ["a"])
    with pytest.raises(TimeoutError):
        area.commit("q", "7", [0], topic, no_wait)

    topic.outcomes[0].set_exception(RuntimeError("topic closed while publishing"))

    for _ in range(2):
        with pytest.raises(RuntimeError, match="topic closed while publishing"):
            area.commit("q", "7", [0], topic, no_wait)
    assert topic.handed == [["a"]]
    assert area.staged() == 0


def test_a_part_over_the_limit_is_refused_and_nothing_is_staged() -> None:
    area: StagingArea[list[str]] = StagingArea(
        limits=StagingLimits(max_part_bytes=100, max_producer_bytes=1000))

    with pytest.raises(NotTransferableError, match="101 bytes, over the limit of 100"):
        area.stage("q", "0", 0, ["x"], size=101)

    assert area.staged() == 0 and area.held("q") == 0


def test_a_producer_holds_at_most_its_limit_until_commit_abort_or_expiry() -> None:
    clock = FakeClock()
    area: StagingArea[list[str]] = StagingArea(
        ttl=60.0, clock=clock, limits=StagingLimits(max_part_bytes=100, max_producer_bytes=250))
    sink = Sink()
    area.stage("q", "0", 0, ["a"], size=100)
    area.stage("q", "1", 0, ["b"], size=100)
    area.stage("q", "1", 0, ["b"], size=90)  # replaces the part: 190 held

    with pytest.raises(NotTransferableError, match=r"'q' would hold about 290 bytes"):
        area.stage("q", "2", 0, ["c"], size=100)
    other = area.stage("r", "0", 0, ["d"], size=100)  # another producer: its own bound
    held = area.held("q")
    commit(area, "q", "0", [0], sink)
    after_commit = area.held("q")
    area.abort("q", "1")
    after_abort = area.held("q")
    area.stage("q", "2", 0, ["c"], size=100)
    clock.now = 61.0
    area.expire()

    assert other is True
    assert (held, after_commit, after_abort, area.held("q")) == (190, 90, 0, 0)
    assert sink.published == [["a"]]


@pytest.mark.parametrize("name", ["max_part_bytes", "max_producer_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_staging_limits_must_be_positive_ints(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        StagingLimits(**{name: value})  # type: ignore[arg-type]


def test_settled_together_waits_for_all_and_reports_the_first_failure() -> None:
    futures: list[Future[Any]] = [Future() for _ in range(3)]
    together = settled_together(futures)
    futures[2].set_exception(ValueError("third"))
    futures[1].set_exception(KeyError("second"))
    pending = together.done()
    futures[0].set_result(["id"])

    assert pending is False
    assert isinstance(together.exception(timeout=0), KeyError)
    assert settled_together([]).result(timeout=0) is None


# Through a real broker socket.

KEY = b"staging-test-key"


def _ipc(batch: Any, **options: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(**options)) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _payloads(*values: bytes) -> bytes:
    import pyarrow as pa

    return _ipc(pa.RecordBatch.from_pydict({"payload": pa.array(values, pa.binary())}))


def _bad_offset_frame(offset: int) -> bytes:
    """A valid 312-byte frame of two payloads whose last offset is replaced: reading it
    unchecked reads ``offset - 3`` bytes past the 5 the frame holds."""
    import struct

    frame = _payloads(b"abc", b"de")
    good = struct.pack("<3i", 0, 3, 5)
    assert len(frame) == 312 and frame.count(good) == 1
    return frame.replace(good, struct.pack("<3i", 0, 3, offset))


def _published(bus: Any, name: str, count: int) -> list[Any]:
    reader = bus.topic(name).subscription(group="check", prefetch=count + 1)
    out: list[Any] = []
    while len(out) < count:
        received = reader.receive_many(count - len(out), timeout=10)
        for delivery in received:  # as they come: a full group waits for room
            delivery.ack()
        out += received
    reader.unsubscribe()
    return out


@pytest.fixture
def served() -> Any:
    from runtime import Bus
    from runtime.broker._server import serve

    with Bus() as bus:
        bus.create_topic("t", ack_timeout=None).create_group("check")
        with serve(bus, authkey=KEY, staging_limits=StagingLimits(
                max_part_bytes=64 * 1024, max_producer_bytes=256 * 1024)) as server:
            yield bus, server


@pytest.mark.parametrize("offset", [100_000, 2**31 - 1])
def test_a_frame_with_a_bad_offset_is_refused_and_the_connection_stays_usable(
    served: Any, offset: int,
) -> None:
    from runtime.broker._client import Channel

    bus, server = served
    with Channel(server.address, KEY) as channel:
        with pytest.raises(NotTransferableError, match="offset") as refused:
            channel.call("stage", "t", "p", "0", (0, 0, 0), _bad_offset_frame(offset))
        staged = channel.call("stage", "t", "p", "0", (1, 0, 0), _payloads(b"ok"))
        committed = channel.call("commit", "t", "p", "0", [(0, 0, 0), (1, 0, 0)])

    assert "broker call 'stage' refused" in str(refused.value)
    assert (staged, committed) == (True, True)
    assert [d.message.data for d in _published(bus, "t", 1)] == [b"ok"]
    assert bus.topic("t").stats().published == 1


@pytest.mark.parametrize(("options", "refusal"), [
    ({"compression": "zstd"}, "compressed"),
    ({"compression": "lz4"}, "compressed"),
])
def test_a_small_frame_that_inflates_is_refused_before_it_is_decoded(
    served: Any, options: dict[str, Any], refusal: str,
) -> None:
    import pyarrow as pa

    from runtime.broker._client import Channel

    _, server = served
    rows = pa.RecordBatch.from_pydict({"payload": pa.array([bytes(4096)] * 4096, pa.binary())})
    frame = _ipc(rows, **options)  # 16 MiB of rows in a frame of a few KB
    with Channel(server.address, KEY) as channel:
        with pytest.raises(NotTransferableError, match=refusal):
            channel.call("stage", "t", "p", "0", (0, 0, 0), frame)
        still = channel.call("stage", "t", "p", "0", (1, 0, 0), _payloads(b"ok"))

    assert len(frame) < 100_000 and still is True
    assert server.service._staging.held(("t", "p")) < 1024


def test_a_dictionary_encoded_frame_is_refused(served: Any) -> None:
    import pyarrow as pa

    from runtime.broker._client import Channel

    _, server = served
    column = pa.array([bytes(1024)] * 10_000, pa.binary()).dictionary_encode()
    frame = _ipc(pa.RecordBatch.from_arrays([column], names=["payload"]))
    with Channel(server.address, KEY) as channel, \
            pytest.raises(NotTransferableError, match="'payload' has type dictionary"):
        channel.call("stage", "t", "p", "0", (0, 0, 0), frame)


@pytest.mark.parametrize(("columns", "refusal"), [
    ({"payload": [b"a"], "other": [1]}, "unknown column 'other'"),
    ({"key": ["k"]}, "with a payload"),
    ({"payload": [1]}, "'payload' has type int64"),
    ({"payload": [b"a"], "attributes": [[("k", 1)]]}, "'attributes' has type map<string, int64>"),
])
def test_a_frame_of_other_columns_is_refused_naming_them(
    served: Any, columns: dict[str, Any], refusal: str,
) -> None:
    import pyarrow as pa

    from runtime.broker._client import Channel

    _, server = served
    types = {"attributes": pa.map_(pa.string(), pa.int64())}
    frame = _ipc(pa.RecordBatch.from_pydict(
        {name: pa.array(values, types.get(name)) for name, values in columns.items()}))
    with Channel(server.address, KEY) as channel, pytest.raises(NotTransferableError, match=refusal):
        channel.call("stage", "t", "p", "0", (0, 0, 0), frame)


def test_decoded_size_is_bounded_per_part_and_per_producer(served: Any) -> None:
    from runtime.broker._client import Channel

    bus, server = served
    with Channel(server.address, KEY) as channel:
        with pytest.raises(NotTransferableError, match=r"decode to about [\d,]+ bytes, over "
                           r"the limit of 65,536 bytes per part"):
            channel.call("stage", "t", "p", "0", (0, 0, 0), _payloads(*[b"x"] * 1000))
        for part in range(4):  # about 60 KB each: 4 fit in 256 KiB, a fifth does not
            channel.call("stage", "t", "p", "0", (part, 0, 0), _payloads(*[bytes(60_000)]))
        with pytest.raises(NotTransferableError, match=r"producer \('t', 'p'\) would hold"):
            channel.call("stage", "t", "p", "1", (0, 0, 0), _payloads(*[bytes(60_000)]))
        committed = channel.call("commit", "t", "p", "0", [(part, 0, 0) for part in range(4)])
        after = channel.call("stage", "t", "p", "1", (0, 0, 0), _payloads(*[bytes(60_000)]))

    assert (committed, after) == (True, True)
    assert len(_published(bus, "t", 4)) == 4


def test_a_commit_that_timed_out_on_backpressure_publishes_once() -> None:
    from runtime import Bus
    from runtime.broker._client import Channel
    from runtime.broker._server import serve

    rows = 3000
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=None)  # its group holds 128 at most
        topic.create_group("check")
        with serve(bus, authkey=KEY, publish_timeout=0.5) as server, \
                Channel(server.address, KEY) as channel:
            channel.call("stage", "t", "p", "0", (0, 0, 0), {"payload": [b"%04d" % i for i in range(rows)]})
            with pytest.raises(TimeoutError, match="timed out"):
                channel.call("commit", "t", "p", "0", [(0, 0, 0)])  # nobody reads: it waits
            out = _published(bus, "t", rows)  # room again: the rows in flight go on
            outcomes = []
            for _ in range(40):  # each retry waits for the same rows, 0.5 s at most
                try:
                    outcomes.append(channel.call("commit", "t", "p", "0", [(0, 0, 0)]))
                    break
                except TimeoutError:
                    continue
            again = channel.call("commit", "t", "p", "0", [(0, 0, 0)])
        topic._sync()
        stats = topic.stats()

    assert outcomes in ([True], [False]) and again is False
    assert sorted(d.message.data for d in out) == [b"%04d" % i for i in range(rows)]
    assert len({d.message_id for d in out}) == rows
    assert (stats.published, stats.delivered, stats.pending) == (rows, rows, 0)
