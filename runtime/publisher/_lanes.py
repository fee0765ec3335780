"""Splitting a burst of publishes (parallel lists) into one lane per ordering key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["COLUMNS_FROM", "lanes_of", "pick"]

T = TypeVar("T")

# Messages per lane (on average) from which a burst is split into columns per lane
# rather than a row per message: picking five columns and slicing them into batches
# costs a few microseconds per lane, a row tuple per message costs a little per message
# (and, held by the thousand, full garbage collections). Per message, 16 keys
# (`Batcher` calls included, collector on): 210 messages, rows 0.27 µs, columns
# 0.43; 4,000 messages, rows 0.23, columns 0.20; 16,000, rows 0.36, columns 0.20.
COLUMNS_FROM = 64


def lanes_of(keys: list[str | None]) -> dict[str | None, list[int]]:
    """The indexes of each key's messages, keys in order of first appearance."""
    lanes: dict[str | None, list[int]] = {}
    for index, key in enumerate(keys):
        lane = lanes.get(key)
        if lane is None:
            lanes[key] = [index]
        else:
            lane.append(index)
    return lanes


def pick(column: Sequence[T], indexes: list[int]) -> list[T]:
    """The items of ``column`` at ``indexes``, in that order."""
    return list(map(column.__getitem__, indexes))


def rows_by_key(columns: tuple[list[Any], ...], key_column: int) -> dict[Any, list[tuple[Any, ...]]]:
    """The rows of parallel ``columns``, one list per key (``columns[key_column]``), in order."""
    lanes: dict[Any, list[tuple[Any, ...]]] = {}
    for row in zip(*columns, strict=True):
        lanes.setdefault(row[key_column], []).append(row)
    return lanes
