"""The core's column picker, which takes a lane's items from parallel lists."""

from __future__ import annotations

import pytest

from runtime.core._block import picker


@pytest.mark.parametrize("indexes", [[], [2], [4, 0, 3], list(range(5))])
def test_a_picker_takes_a_column_s_items_in_the_order_of_its_indexes(indexes: list[int]) -> None:
    column = ["a", "b", "c", "d", "e"]

    picked = picker(indexes)(column)

    assert picked == [column[i] for i in indexes] and type(picked) is list

