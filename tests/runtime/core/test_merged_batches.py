"""The topic actor: small Publisher batches queued behind each other are fanned out together."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from actors import ActorSystem
from runtime.core._publishing import PartlyPublished
from runtime.core._topic_actor import PublishBatch, PublishRun, TopicActor
from runtime.errors import TopicClosedError


class GatedPath:
    """A publish path whose first publish waits for ``release``, so later batches queue up.

    Records each call's data; ids are the data decoded. With ``accept``, a call accepts
    only that many messages, then raises `PartlyPublished` with a closed topic.
    """

    def __init__(self, chunk: int, accept: int | None = None) -> None:
        self.chunk = chunk
        self.calls: list[list[bytes]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._accept = accept

    def room(self, keyed: bool) -> int:
        return self.chunk  # no groups: the chunk the settings make

    def publish_parts(self, datas: list[bytes], attributes: Any, keys: Any) -> list[str]:
        self.calls.append(list(datas))
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(10.0)
            return [d.decode() for d in datas]
        if self._accept is None:
            return [d.decode() for d in datas]
        if self._accept == 0:
            raise TopicClosedError("t")
        ids = [d.decode() for d in datas[:self._accept]]
        raise PartlyPublished(ids, TopicClosedError("t"))


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    with ActorSystem() as actor_system:
        yield actor_system


def _batch(*numbers: int) -> PublishBatch:
    datas = [b"%d" % n for n in numbers]
    return PublishBatch(datas, [{} for _ in datas], [None for _ in datas], Future())


def _send_behind_a_blocked_one(system: ActorSystem, path: GatedPath,
                               batches: list[PublishBatch]) -> list[PublishBatch]:
    ref = system.spawn(TopicActor, path)
    first = _batch(0)
    ref.tell(first)
    assert path.entered.wait(10.0)
    for batch in batches:
        ref.tell(batch)
    path.release.set()
    return [first, *batches]


def test_small_batches_waiting_in_the_mailbox_are_published_together(
    system: ActorSystem,
) -> None:
    path = GatedPath(chunk=10)
    batches = [_batch(1, 2), _batch(3, 4, 5), _batch(6), _batch(7, 8, 9, 10), _batch(11)]

    sent = _send_behind_a_blocked_one(system, path, batches)
    results = [batch.future.result(10.0) for batch in sent]

    assert results == [["0"], ["1", "2"], ["3", "4", "5"], ["6"], ["7", "8", "9", "10"], ["11"]]
    # Merged while the next batch, if as large as the last, would still fit a chunk of 10.
    assert path.calls == [[b"0"], [b"%d" % n for n in range(1, 11)], [b"11"]]


def test_a_batch_as_large_as_a_chunk_goes_alone(system: ActorSystem) -> None:
    path = GatedPath(chunk=4)

    sent = _send_behind_a_blocked_one(system, path, [_batch(1, 2, 3), _batch(4, 5, 6)])
    results = [batch.future.result(10.0) for batch in sent]

    assert results == [["0"], ["1", "2", "3"], ["4", "5", "6"]]
    assert path.calls == [[b"0"], [b"1", b"2", b"3"], [b"4", b"5", b"6"]]


def test_a_run_never_splits_a_batch_that_fits_one_chunk(system: ActorSystem) -> None:
    path = GatedPath(chunk=5)

    sent = _send_behind_a_blocked_one(system, path, [_batch(1, 2), _batch(3, 4, 5, 6)])
    results = [batch.future.result(10.0) for batch in sent]

    assert results == [["0"], ["1", "2"], ["3", "4", "5", "6"]]
    assert path.calls == [[b"0"], [b"1", b"2"], [b"3", b"4", b"5", b"6"]]


def test_a_merged_run_refused_midway_settles_each_batch_for_its_own_part(
    system: ActorSystem,
) -> None:
    path = GatedPath(chunk=20, accept=3)
    batches = [_batch(1, 2), _batch(3, 4), _batch(5)]

    _send_behind_a_blocked_one(system, path, batches)

    assert batches[0].future.result(10.0) == ["1", "2"]
    partial = batches[1].future.exception(10.0)
    assert isinstance(partial, PartlyPublished)
    assert partial.ids == ["3"] and isinstance(partial.error, TopicClosedError)
    assert isinstance(batches[2].future.exception(10.0), TopicClosedError)


def test_a_merged_run_refused_whole_fails_every_batch(system: ActorSystem) -> None:
    path = GatedPath(chunk=20, accept=0)
    batches = [_batch(1, 2), _batch(3)]

    _send_behind_a_blocked_one(system, path, batches)

    assert all(isinstance(b.future.exception(10.0), TopicClosedError) for b in batches)


class RoomPath:
    """A publish path whose room is given per call, each call's ``keyed`` recorded."""

    def __init__(self, rooms: list[int], accept: int | None = None) -> None:
        self.rooms = rooms
        self.keyed: list[bool] = []
        self.calls: list[list[bytes]] = []
        self._accept = accept

    def room(self, keyed: bool) -> int:
        self.keyed.append(keyed)
        return self.rooms[min(len(self.keyed), len(self.rooms)) - 1]

    def publish_parts(self, datas: list[bytes], attributes: Any, keys: Any) -> list[str]:
        self.calls.append(list(datas))
        ids = [d.decode() for d in datas]
        if self._accept is not None and sum(map(len, self.calls)) > self._accept:
            kept = len(ids) - (sum(map(len, self.calls)) - self._accept)
            if kept <= 0:
                raise TopicClosedError("t")
            raise PartlyPublished(ids[:kept], TopicClosedError("t"))
        return ids


def _run(system: ActorSystem, path: RoomPath, *batches: tuple[list[int], str | None]) -> list[Any]:
    """Tell a `PublishRun` of ``batches`` (numbers, key) to a topic actor; its outcomes."""
    replied: Future[list[Any]] = Future()
    parts = [([b"%d" % n for n in numbers], [{} for _ in numbers], [key for _ in numbers])
             for numbers, key in batches]
    system.spawn(TopicActor, path).tell(PublishRun(parts, replied.set_result))
    return replied.result(10.0)


def test_a_run_reads_the_room_again_after_each_publish(system: ActorSystem) -> None:
    # Room for 2 at first; the publish that took it left room for 100 (a group that
    # dispatched meanwhile): the rest of the run goes out together.
    path = RoomPath([2, 100])

    outcomes = _run(system, path, ([1], None), ([2], None), ([3, 4], None), ([5], None))

    assert path.calls == [[b"1", b"2"], [b"3", b"4", b"5"]]
    assert outcomes == [(["1"], None), (["2"], None), (["3", "4"], None), (["5"], None)]
    assert path.keyed == [False, False]  # unkeyed: the room any member may fill


def test_a_run_with_a_keyed_batch_sizes_by_the_keyed_room(system: ActorSystem) -> None:
    path = RoomPath([3])

    outcomes = _run(system, path, ([1, 2], None), ([3], "k"), ([4], None))

    assert path.calls == [[b"1", b"2", b"3"], [b"4"]]
    assert [ids for ids, _ in outcomes] == [["1", "2"], ["3"], ["4"]]
    assert path.keyed == [True, True]


def test_a_run_refused_midway_answers_each_batch_for_its_own_part(system: ActorSystem) -> None:
    path = RoomPath([100], accept=3)

    outcomes = _run(system, path, ([1, 2], None), ([3, 4], None), ([5], None))

    assert outcomes[0] == (["1", "2"], None)
    ids, error = outcomes[1]
    assert ids == ["3"] and isinstance(error, TopicClosedError)
    assert outcomes[2][0] is None and isinstance(outcomes[2][1], TopicClosedError)
