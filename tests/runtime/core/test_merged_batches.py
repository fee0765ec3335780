"""The topic actor: batches sent together are fanned out together, each with its own outcome."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from actors import ActorSystem
from runtime import Bus, Message
from runtime.core._publishing import PartlyPublished
from runtime.core._topic_actor import PublishBatches, TopicActor
from runtime.errors import MessageTypeError, TopicClosedError


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    with ActorSystem() as actor_system:
        yield actor_system


def _unkeyed(*numbers: int) -> tuple[list[int], None]:
    return list(numbers), None


def test_small_batches_sent_together_are_published_together(system: ActorSystem) -> None:
    path = RoomPath([10])

    outcomes = _run(system, path, _unkeyed(1, 2), _unkeyed(3, 4, 5), _unkeyed(6),
                    _unkeyed(7, 8, 9, 10), _unkeyed(11))

    assert [ids for ids, _ in outcomes] == [["1", "2"], ["3", "4", "5"], ["6"],
                                            ["7", "8", "9", "10"], ["11"]]
    assert path.calls == [[b"%d" % n for n in range(1, 11)], [b"11"]]


def test_a_batch_as_large_as_a_chunk_goes_alone(system: ActorSystem) -> None:
    path = RoomPath([3])

    outcomes = _run(system, path, _unkeyed(1, 2, 3), _unkeyed(4, 5, 6))

    assert [ids for ids, _ in outcomes] == [["1", "2", "3"], ["4", "5", "6"]]
    assert path.calls == [[b"1", b"2", b"3"], [b"4", b"5", b"6"]]


def test_a_run_never_splits_a_batch_that_fits_one_chunk(system: ActorSystem) -> None:
    path = RoomPath([5])

    outcomes = _run(system, path, _unkeyed(1, 2), _unkeyed(3, 4, 5, 6))

    assert [ids for ids, _ in outcomes] == [["1", "2"], ["3", "4", "5", "6"]]
    assert path.calls == [[b"1", b"2"], [b"3", b"4", b"5", b"6"]]


def test_a_run_refused_whole_fails_every_batch(system: ActorSystem) -> None:
    path = RoomPath([100], accept=0)

    outcomes = _run(system, path, _unkeyed(1, 2), _unkeyed(3))

    assert [ids for ids, _ in outcomes] == [None, None]
    assert all(isinstance(error, TopicClosedError) for _, error in outcomes)


def test_a_batch_refused_by_a_check_fails_alone_and_the_others_are_published() -> None:
    with Bus() as bus:
        topic = bus.create_topic("batches", ack_timeout=None)
        topic.create_group("g")
        bad_key: Any = 7

        outcomes = topic._publish_batches([
            ([b"a"], [{}], ["k1"]), ([b"b", b"c"], [{}, {}], [None, bad_key]),
            ([b"d"], [{}], ["k2"]),
        ]).result(10.0)

        assert [ids for ids, _ in outcomes] == [["1"], None, ["2"]]
        assert isinstance(outcomes[1][1], TypeError)
        assert topic.stats().published == 2


def test_a_batch_of_the_wrong_type_fails_alone() -> None:
    with Bus() as bus:
        topic = bus.create_topic("typed", message_type=int, ack_timeout=None)
        topic.create_group("g")

        outcomes = topic._publish_batches([([b"a"], [{}], [None])]).result(10.0)

        assert outcomes[0][0] is None and isinstance(outcomes[0][1], MessageTypeError)


def test_stamped_blocks_and_parts_go_in_one_message_in_order() -> None:
    with Bus() as bus:
        topic = bus.create_topic("staged", ack_timeout=None)
        topic.create_group("g")
        block = topic._stamp_parts([b"s1", b"s2"], [{}, {}], [None, None])  # ids 1 and 2

        outcomes = topic._publish_batches([([b"p"], [{}], [None]), block]).result(10.0)

        assert [list(ids or []) for ids, _ in outcomes] == [["3"], ["1", "2"]]
        assert topic.stats().published == 3


def test_a_closed_topic_answers_every_batch_at_once() -> None:
    with Bus() as bus:
        topic = bus.create_topic("closed")
        topic.close()

        outcomes = topic._publish_batches([([b"a"], [{}], [None])] * 2).result(0)

        assert [ids for ids, _ in outcomes] == [None, None]
        assert all(isinstance(error, TopicClosedError) for _, error in outcomes)
        with pytest.raises(TopicClosedError):
            topic._publish_batch([Message(data=b"a")]).result(0)


def test_a_partly_published_batch_fails_its_ids_future_with_the_prefix(
    system: ActorSystem,
) -> None:
    path = RoomPath([100], accept=1)

    outcomes = _run(system, path, _unkeyed(1, 2))

    ids, error = outcomes[0]
    assert ids == ["1"] and isinstance(error, TopicClosedError)
    assert isinstance(PartlyPublished(list(ids), error).error, TopicClosedError)


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

    def stamp_parts(self, datas: list[bytes], attributes: Any, keys: Any) -> list[bytes]:
        return datas

    def publish_envelopes(self, datas: list[bytes], deadline: Any = None) -> list[str]:
        self.calls.append(list(datas))
        ids = [d.decode() for d in datas]
        if self._accept is not None and sum(map(len, self.calls)) > self._accept:
            kept = len(ids) - (sum(map(len, self.calls)) - self._accept)
            if kept <= 0:
                raise TopicClosedError("t")
            raise PartlyPublished(ids[:kept], TopicClosedError("t"))
        return ids


def _run(system: ActorSystem, path: Any, *batches: tuple[list[int], str | None]) -> list[Any]:
    """Tell one `PublishBatches` of ``batches`` (numbers, key) to a topic actor; its outcomes."""
    replied: Future[list[Any]] = Future()
    parts: list[Any] = [([b"%d" % n for n in numbers], [{} for _ in numbers], [key for _ in numbers])
             for numbers, key in batches]
    system.spawn(TopicActor, path).tell(PublishBatches(parts, replied))
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
