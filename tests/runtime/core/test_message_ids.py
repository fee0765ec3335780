"""Message ids: the decimal strings of the sequence numbers, built from a suffix table."""

from __future__ import annotations

import pytest

from runtime import Bus
from runtime.core._envelope import MESSAGE_ID, SEQ, message_ids


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
    assert [e[MESSAGE_ID] for e in envelopes] == [str(n) for n in range(991, 3_091)]
    assert [e[MESSAGE_ID] for e in first] == [str(n) for n in range(1, 991)]
