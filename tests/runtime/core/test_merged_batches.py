"""The topic actor: small Publisher batches queued behind each other are fanned out together."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from actors import ActorSystem
from runtime.core._publishing import PartlyPublished
from runtime.core._topic_actor import PublishBatch, TopicActor
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
