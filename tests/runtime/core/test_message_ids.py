"""Message ids: the decimal strings of the sequence numbers, built from a suffix table,
read off an envelope (`message_id`), and a published batch's in order (`ids_of`)."""

from __future__ import annotations

import pytest

from runtime import Bus
from runtime.core._envelope import MESSAGE_ID, SEQ, message_id, message_ids
from runtime.core._topic_actor import batch_ids


@pytest.mark.parametrize("first", [0, 1, 7, 998, 999, 1000, 1001, 123_456, 999_999, 10**12 - 2])
@pytest.mark.parametrize("count", [0, 1, 2, 100, 1000, 2_345])
def test_ids_are_the_decimal_strings_of_consecutive_numbers(first: int, count: int) -> None:
    ids = message_ids(first, count)

    assert ids == [str(number) for number in range(first, first + count)]


def test_a_publisher_batch_s_ids_follow_its_sequence_numbers_across_a_thousand() -> None:
    with Bus() as bus:
        topic = bus.create_topic("ids", ack_timeout=None, balanced_capacity=5_000)
        topic.create_group("g")
        first = topic._stamp_parts([b"a"] * 990, [{}] * 990, [None] * 990)

        envelopes = topic._stamp_parts([b"b"] * 2_100, [{}] * 2_100, [None] * 2_100)

    assert [e[SEQ] for e in envelopes] == list(range(991, 3_091))
    assert {e[MESSAGE_ID] for e in [*first, *envelopes]} == {None}  # no string per message
    assert list(map(message_id, envelopes)) == [str(n) for n in range(991, 3_091)]
    assert list(map(message_id, first)) == [str(n) for n in range(1, 991)]


def test_an_envelope_with_an_id_of_its_own_reads_it() -> None:
    assert message_id((-3, "17", b"x", None, None, "t", None)) == "17"
    assert message_id((17, None, b"x", None, None, "t", None)) == "17"


def test_a_publisher_batch_s_ids_are_its_numbers_in_order() -> None:
    with Bus() as bus:
        topic = bus.create_topic("ids", ack_timeout=None)
        topic.create_group("g")
        before = batch_ids(topic._publish_batches([([b"a"] * 3, [{}] * 3, [None] * 3)])).result(5)

        ids = batch_ids(topic._publish_batches([([b"b"] * 2, [{"k": "v"}, {}], ["x", None])])).result(5)

    assert before == ["1", "2", "3"] and ids == ["4", "5"]


def test_staged_parts_joined_and_published_in_slices_get_their_own_ids() -> None:
    from runtime.core._block import Block, join_envelopes

    with Bus() as bus:
        topic = bus.create_topic("ids", ack_timeout=None, balanced_capacity=10_000)
        topic.create_group("g")
        first = topic._stamp_parts([b"a"] * 30, [{}] * 30, [None] * 30)
        topic._stamp_parts([b"x"] * 5, [{}] * 5, [None] * 5)  # staged elsewhere: a gap
        second = topic._stamp_parts([b"b"] * 20, [{}] * 20, [None] * 20)
        joined = join_envelopes([first, second])  # numbers 1-30 and 36-55: two runs

        inside = batch_ids(topic._publish_batches([joined[5:25]])).result(5)  # within the first run
        across = batch_ids(topic._publish_batches([joined[25:40]])).result(5)  # across both runs

    assert type(joined) is Block
    assert inside == [str(n) for n in range(6, 26)]
    assert across == [str(n) for n in [*range(26, 31), *range(36, 46)]]
