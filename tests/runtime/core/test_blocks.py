"""Blocks: Publisher messages kept as columns from the topic to a worker's batch, and
the group queue (`Fifo`) that holds them without reading a message."""

from __future__ import annotations

import pickle
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest

from runtime.broker.lease._record import envelope_columns
from runtime.core._block import Block, Runs, join_envelopes, keys_of
from runtime.core._envelope import message_of
from runtime.core._topic_actor import _merged_keys
from runtime.core.subscribers._group import Fifo, sort_by_key, split_keyed, take_share
from runtime.core.subscribers._work_batch import WorkBatch


def _block(first: int, size: int, *, keys: bool = False, attrs: bool = False,
           stamp: float = 100.0) -> Block:
    return Block(
        range(first, first + size), [b"m%d" % n for n in range(first, first + size)],
        [f"k{n % 3}" if n % 2 else None for n in range(first, first + size)] if keys else None,
        [{"n": str(n)} if n % 2 else None for n in range(first, first + size)] if attrs else None,
        "t", stamp)


def _tuples(block: Block) -> list[tuple[Any, ...]]:
    size = len(block)
    keys = block.keys or [None] * size
    attrs = block.attributes or [None] * size
    stamps = block.stamps if isinstance(block.stamps, list) else [block.stamps] * size
    return [(s, None, p, k, a, "t", t) for s, p, k, a, t in zip(
        block.seqs, block.payloads, keys, attrs, stamps, strict=True)]


@pytest.mark.parametrize("keys", [False, True])
@pytest.mark.parametrize("attrs", [False, True])
def test_a_block_reads_as_the_envelopes_it_stands_for(keys: bool, attrs: bool) -> None:
    block = _block(5, 7, keys=keys, attrs=attrs)
    expected = _tuples(block)

    assert list(block) == expected
    assert [block[i] for i in range(7)] == expected
    assert block[-1] == expected[-1]
    assert list(block[2:5]) == expected[2:5]
    assert type(block[2:5]) is Block and block[2:5].seqs == range(7, 10)
    assert block.seqs == range(5, 12)
    assert keys_of(block) == [e[3] for e in expected]
    assert message_of(block[0]).message_id == "5"


def test_joined_blocks_keep_one_value_where_every_block_has_one() -> None:
    joined = Block.join([_block(1, 3), _block(4, 2), _block(6, 4)])

    assert joined.seqs == range(1, 10)
    assert joined.stamps == 100.0 and joined.keys is None and joined.attributes is None
    assert joined.payloads == [b"m%d" % n for n in range(1, 10)]


def test_joined_blocks_spell_out_a_column_where_blocks_differ() -> None:
    parts = [_block(1, 3), _block(10, 2, keys=True, attrs=True, stamp=200.0), _block(12, 1)]

    joined = Block.join(parts)

    assert joined.seqs == [1, 2, 3, 10, 11, 12]
    assert joined.stamps == [100.0] * 3 + [200.0] * 2 + [100.0]
    assert list(joined) == [e for part in parts for e in _tuples(part)]


def test_pieces_that_are_not_all_blocks_join_as_one_list() -> None:
    plain = [(50, None, "obj", None, None, "t", None)]

    joined = join_envelopes([_block(1, 2), plain])

    assert joined == _tuples(_block(1, 2)) + plain


def test_a_fifo_takes_across_pieces_and_from_inside_one_in_order() -> None:
    first, second = _block(1, 5), _block(6, 5)
    fifo = Fifo()
    fifo.extend(first)
    fifo.extend([])
    fifo.extend(second)

    assert len(fifo) == 10
    taken = [fifo.take(3), fifo.take(4)]
    assert [list(t) for t in taken] == [_tuples(first)[:3], _tuples(first)[3:] + _tuples(second)[:2]]
    assert type(taken[1]) is Block and taken[1].seqs == range(4, 8)
    assert list(fifo) == _tuples(second)[2:] and len(fifo) == 3
    assert list(fifo.take(10)) == _tuples(second)[2:]
    assert not fifo and list(fifo) == [] and fifo.take(5) == []
    assert list(first) == _tuples(_block(1, 5))  # pieces are read, never changed


def test_a_hand_over_of_a_whole_queue_of_blocks_is_one_block() -> None:
    fifo = Fifo()
    for start in range(1, 100, 10):
        fifo.extend(_block(start, 10))

    envelopes, attempts = take_share(None, deque(), fifo, 1000, 1000)

    assert type(envelopes) is Block and envelopes.seqs == range(1, 101)
    assert attempts is None and not fifo


def test_keyed_runs_of_a_block_are_routed_as_slices_in_order() -> None:
    block = Block(range(1, 13), [b"x"] * 12, ["a"] * 4 + [None] * 4 + ["b"] * 4, None, "t", 1.0)
    queue, buckets = Fifo(), {1: Fifo(), 2: Fifo()}

    sort_by_key(block, [1, 2], queue, buckets)

    assert [e[0] for e in queue] == [5, 6, 7, 8]
    for member, bucket in buckets.items():
        keys = {k for k in ("a", "b") if [1, 2][hash(k) % 2] == member}
        assert [e[0] for e in bucket] == [e[0] for e in block if e[3] in keys]


@pytest.mark.parametrize("stamps", [7.0, [float(n) for n in range(64)]])
def test_a_block_of_interleaved_keys_reaches_each_queue_as_one_block_of_its_messages(
    stamps: float | list[float],
) -> None:
    keys = [None if n % 5 == 0 else f"k{n % 16}" for n in range(64)]  # a key change each
    block = Block(range(1, 65), [b"m%d" % n for n in range(64)], keys,
                  [{"n": str(n)} if n % 3 else None for n in range(64)], "t", stamps)
    queue, buckets = Fifo(), {1: Fifo(), 2: Fifo()}

    sort_by_key(block, [1, 2], queue, buckets)

    expected: dict[int, list[Any]] = {0: [], 1: [], 2: []}
    for envelope in block:
        key = envelope[3]
        expected[0 if key is None else [1, 2][hash(key) % 2]].append(envelope)
    for member, fifo in ((0, queue), *buckets.items()):
        assert [type(piece) for piece in fifo.pieces()] == [Block] * bool(expected[member])
        assert list(fifo) == expected[member]
    assert sum(map(len, expected.values())) == 64 and all(expected.values())


def _routed(keys: Sequence[str | None]) -> tuple[list[int], dict[int, list[int]]]:
    block = Block(range(1, len(keys) + 1), [b"x"] * len(keys), keys, None, "t", 1.0)
    queue, buckets = Fifo(), {1: Fifo(), 2: Fifo(), 3: Fifo()}
    sort_by_key(block, [1, 2, 3], queue, buckets)
    return [e[0] for e in queue], {m: [e[0] for e in b] for m, b in buckets.items()}


def test_keys_kept_as_runs_route_as_the_same_keys_spelled_out() -> None:
    runs = Runs(["a", None, "b", "a", "c", None], [3, 2, 4, 1, 2, 3])

    queue, buckets = _routed(runs)

    assert (queue, buckets) == _routed(list(runs))
    assert queue == [4, 5, 13, 14, 15]
    assert sum(map(len, buckets.values())) == 10


def _merged_block(first: int, keys: list[str | None], counts: list[int]) -> Block:
    size = sum(counts)
    return Block(range(first, first + size), [b"m%d" % n for n in range(first, first + size)],
                 Runs(keys, counts), [{"n": str(n)} if n % 3 else None
                                      for n in range(first, first + size)], "t", 7.0)


def test_a_merged_chunk_reaches_each_queue_as_one_block_whose_numbers_and_keys_stay_runs(
) -> None:
    chunks = [_merged_block(1, ["a", "b", None, "c", "a"], [3, 2, 2, 4, 1]),
              _merged_block(13, ["c", "b", "a"], [2, 3, 1])]
    queue, buckets = Fifo(), {1: Fifo(), 2: Fifo()}
    for chunk in chunks:
        sort_by_key(chunk, [1, 2], queue, buckets)

    expected = {1: [], 2: []}
    for envelope in (e for chunk in chunks for e in chunk if e[3] is not None):
        expected[[1, 2][hash(envelope[3]) % 2]].append(envelope)
    for member, bucket in buckets.items():
        assert len(bucket.pieces()) == len([c for c in chunks if any(
            [1, 2][hash(k) % 2] == member for k in c.keys.values if k)])  # one per chunk
        taken = bucket.take(100)
        assert list(taken) == expected[member]
        if expected[member]:
            assert type(taken.seqs) is Runs and type(taken.keys) is Runs
            assert WorkBatch.of_envelopes(1, "g", "t", taken, None) == WorkBatch.of_envelopes(
                1, "g", "t", expected[member], None)
    assert [e[0] for e in queue] == [6, 7]


def test_a_joined_block_of_one_key_parts_routes_as_its_envelopes_spelled_out() -> None:
    parts = [Block(range(start, start + 3), [b"%d" % n for n in range(start, start + 3)],
                   [key] * 3, None, "t", float(start))
             for start, key in ((1, "a"), (41, "b"), (21, "a"), (81, "c"))]
    joined = Block.join(parts)  # numbers, keys and stamps all runs
    assert type(joined.seqs) is Runs and type(joined.keys) is Runs and type(joined.stamps) is Runs

    routed: list[tuple[list[Any], dict[int, list[Any]]]] = []
    for chunk in (joined, list(joined)):
        queue: Fifo = Fifo()
        buckets: dict[int, Fifo] = {1: Fifo(), 2: Fifo()}
        sort_by_key(chunk, [1, 2], queue, buckets)
        routed.append((list(queue), {m: list(b) for m, b in buckets.items()}))

    assert routed[0] == routed[1]
    assert sum(map(len, routed[0][1].values())) == 12


def test_merged_batches_of_one_key_each_keep_their_keys_as_runs() -> None:
    keys = _merged_keys([["a", "a"], [], ["b"], [None, None], ["a"]])

    assert type(keys) is Runs
    assert (keys.values, keys.counts) == (["a", "b", None, "a"], [2, 1, 2, 1])
    assert list(keys) == ["a", "a", "b", None, None, "a"]


def test_merged_batches_with_a_batch_of_several_keys_spell_their_keys_out() -> None:
    keys = _merged_keys([["a", "a"], ["b", "c"]])

    assert keys == ["a", "a", "b", "c"] and type(keys) is list


def test_a_membership_change_keeps_a_backlog_s_unkeyed_blocks_as_they_are() -> None:
    plain, keyed, later = _block(1, 6), _block(7, 6, keys=True), _block(13, 4)
    fifo = Fifo()
    for piece in (plain, keyed, later):
        fifo.extend(piece)
    fifo.take(2)

    queue, keyed_out = split_keyed(fifo.pieces())

    pieces = queue.pieces()
    assert type(pieces[0]) is Block and pieces[0].seqs == range(3, 7)
    assert pieces[2] is later  # a block without keys is queued as it is, not rebuilt
    assert [e[0] for e in queue] == [3, 4, 5, 6, 8, 10, 12, 13, 14, 15, 16]
    assert [(e[0], e[3]) for e in keyed_out] == [(7, "k1"), (9, "k0"), (11, "k2")]
    assert list(fifo) == _tuples(plain)[2:] + _tuples(keyed) + _tuples(later)  # unchanged


@pytest.mark.parametrize("keys", [False, True])
@pytest.mark.parametrize("attrs", [False, True])
def test_a_work_batch_of_a_block_holds_the_columns_of_its_envelopes(keys: bool, attrs: bool) -> None:
    block = Block.join([_block(1, 4, keys=keys, attrs=attrs), _block(5, 3, stamp=300.0)])

    columns = WorkBatch.of_envelopes(1, "g", "t", block, [1, 2, 1, 1, 1, 1, 1])

    assert columns == WorkBatch.of_envelopes(1, "g", "t", list(block), [1, 2, 1, 1, 1, 1, 1])
    assert columns.seqs == range(1, 8) and columns.ids is None


def test_lease_columns_of_a_block_are_those_of_its_envelopes() -> None:
    block = Block.join([_block(1, 4, keys=True, attrs=True), _block(5, 3, stamp=300.0)])

    assert envelope_columns(block, 0.0) == envelope_columns(list(block), 0.0)


@pytest.mark.parametrize("indexes", [range(7), range(2, 6), range(5, 7), [1, 4, 6]])
def test_a_lease_holds_part_of_a_block_hand_over_as_it_holds_its_envelopes(
    indexes: Sequence[int],
) -> None:
    from runtime.broker.lease._handover import hold
    from runtime.broker.lease._record import LeaseColumns
    from runtime.core.settlement._delivery import Tranche

    block = Block.join([_block(1, 4, keys=True, attrs=True), _block(5, 3, stamp=300.0)])
    held = []
    for envelopes in (block, list(block)):
        columns = LeaseColumns([], [], [], [], [], [])
        owners: list[Any] = []
        at: list[int] = []
        count = hold(columns, owners, at, Tranche(None, 1, "g", envelopes, None), indexes,
                     lambda delivery, error: None)
        held.append((count, tuple(columns), at))

    assert held[0] == held[1] and held[0][0] == len(indexes) and held[0][2] == list(indexes)
    assert held[0][1][0] == [str(block.seqs[i]) for i in indexes]


def test_blocks_and_single_messages_stamped_at_once_never_share_a_number() -> None:
    from runtime import Bus

    with Bus() as bus:
        topic = bus.create_topic("numbers", ack_timeout=None)
        start = threading.Barrier(3)
        blocks: list[Block] = []
        singles: list[int] = []

        def stamp_blocks() -> None:
            start.wait(5)
            blocks.extend(topic._stamp_parts([b"x"] * 7, [{}] * 7, [None] * 7) for _ in range(2_000))

        def stamp_singles() -> None:
            start.wait(5)
            singles.extend(topic._path._take_seqs(1) for _ in range(5_000))

        threads = [threading.Thread(target=f) for f in (stamp_blocks, stamp_blocks, stamp_singles)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

    numbers = [n for block in blocks for n in block.seqs] + singles
    assert len(blocks) == 4_000 and len(singles) == 5_000
    assert sorted(numbers) == list(range(1, 4_000 * 7 + 5_000 + 1))


@pytest.mark.parametrize("step", [0, 1])
def test_runs_read_by_position_and_slice_like_the_list_they_stand_for(step: int) -> None:
    runs = Runs([10, 50, 20, 90], [3, 1, 4, 2], step)
    expected = list(runs)

    assert len(runs) == 10 and runs == expected
    assert expected == ([10, 10, 10, 50, 20, 20, 20, 20, 90, 90] if not step
                        else [10, 11, 12, 50, 20, 21, 22, 23, 90, 91])
    assert [runs[i] for i in range(-10, 10)] == expected + expected
    for start in range(11):
        for stop in range(start, 11):
            assert list(runs[start:stop]) == expected[start:stop], (start, stop)
    assert runs[::3] == expected[::3]
    assert runs.count(expected[4]) == expected.count(expected[4])
    with pytest.raises(IndexError):
        runs[10]
    assert pickle.loads(pickle.dumps(runs)) == expected


def test_an_ordered_publisher_s_blocks_join_as_runs_and_cross_as_runs() -> None:
    parts = [Block(range(start, start + 20), [b"%d" % n for n in range(start, start + 20)],
                   [f"k{start}"] * 20, None, "t", float(start)) for start in (1, 41, 81, 21)]

    joined = Block.join(parts)
    batch = WorkBatch.of_envelopes(1, "g", "t", joined, None)

    assert type(joined.seqs) is Runs and type(joined.keys) is Runs and type(joined.stamps) is Runs
    assert list(joined) == [e for part in parts for e in part]
    assert batch == WorkBatch.of_envelopes(1, "g", "t", list(joined), None)
    assert len(pickle.dumps(batch)) < len(pickle.dumps(
        WorkBatch.of_envelopes(1, "g", "t", list(joined), None))) - 600


def test_joined_attributes_stay_each_message_s_own_dict() -> None:
    first = Block(range(1, 3), [b"a", b"b"], None, [{"x": "1"}, {"x": "1"}], "t", 1.0)
    second = Block(range(3, 4), [b"c"], None, None, "t", 1.0)

    joined = Block.join([first, second])

    assert joined.attributes == [{"x": "1"}, {"x": "1"}, None]
    assert joined.attributes[0] is first.attributes[0]
    assert joined.attributes[1] is first.attributes[1]


def test_empty_blocks_join_as_nothing() -> None:
    empty = Block(range(5, 5), [], None, None, "t", 1.0)

    assert list(Block.join([empty, _block(1, 2), empty])) == _tuples(_block(1, 2))
    assert len(Block.join([empty, empty])) == 0


def test_counting_in_runs_compares_every_item() -> None:
    assert Runs([1, 10], [3, 2], 1).count(None) == 0
    assert Runs([1, 10], [3, 2], 1).count(11) == 1
    assert Runs(["a", None], [3, 2]).count(None) == 2
