"""A column kept as runs (`Runs`): the numbers, keys and publish times of joined
blocks."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, repeat
from operator import add
from typing import Any, overload

__all__ = ["Runs"]


class Runs(Sequence[Any]):
    """A column as runs (``counts[i]`` items from ``values[i]``, each ``step`` more than
    the one before): the numbers, publish times and keys of joined blocks, pickled as
    two short lists instead of one item per message. Read by position it bisects; most
    readers iterate it."""

    __slots__ = ("_ends", "counts", "step", "values")

    def __init__(self, values: list[Any], counts: list[int], step: int = 0) -> None:
        self.values = values
        self.counts = counts
        self.step = step
        self._ends = list(accumulate(counts))

    def ends(self) -> list[int]:
        """Where each run ends (the position after its last item); read, never change it."""
        return self._ends

    def __reduce__(self) -> tuple[type[Runs], tuple[list[Any], list[int], int]]:
        return Runs, (self.values, self.counts, self.step)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __iter__(self) -> Iterator[Any]:
        if self.step:
            return chain.from_iterable(map(range, self.values, map(add, self.values, self.counts)))
        return chain.from_iterable(map(repeat, self.values, self.counts))

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._slice(index)
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        run = bisect_right(self._ends, position)
        if not self.step:
            return self.values[run]
        return self.values[run] + position - (self._ends[run] - self.counts[run])

    def _slice(self, index: slice) -> Sequence[Any]:
        start, stop, stride = index.indices(len(self))
        if stride != 1:
            return list(self)[index]
        if start >= stop:
            return Runs([], [], self.step)
        ends, counts = self._ends, self.counts
        first, last = bisect_right(ends, start), bisect_right(ends, stop - 1)
        values, taken = self.values[first:last + 1], counts[first:last + 1]
        skip = start - (ends[first] - counts[first])
        taken[-1] = stop - (ends[last] - counts[last])
        taken[0] -= skip
        if self.step:
            values[0] += skip
        return Runs(values, taken, self.step)

    def count(self, value: Any) -> int:
        if self.step:
            return sum(1 for item in self if item == value)
        return sum(n for v, n in zip(self.values, self.counts, strict=True) if v == value)

    def __eq__(self, other: object) -> bool:  # equal to any sequence of the same items
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which do not hash
