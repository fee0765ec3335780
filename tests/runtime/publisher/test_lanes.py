"""The Publisher's split of a burst by key: which messages each lane takes."""

from __future__ import annotations

import pytest

from runtime.core._block import picker
from runtime.publisher._lanes import lanes_of


@pytest.mark.parametrize("indexes", [[], [2], [4, 0, 3], list(range(5))])
def test_a_picker_takes_a_column_s_items_in_the_order_of_its_indexes(indexes: list[int]) -> None:
    column = ["a", "b", "c", "d", "e"]

    picked = picker(indexes)(column)

    assert picked == [column[i] for i in indexes] and type(picked) is list


def test_lanes_of_gives_each_keys_indexes_in_order_keys_by_first_appearance() -> None:
    keys: list[str | None] = ["b", "a", None, "b", "c", "a", "b", None]
    lanes = lanes_of(keys)
    assert list(lanes) == ["b", "a", None, "c"]
    assert lanes == {"b": [0, 3, 6], "a": [1, 5], None: [2, 7], "c": [4]}
    assert lanes_of([]) == {}
