"""Offset arithmetic of the lease log: where a fetch's byte budget cuts a range, and
how much two ranges overlap."""

from __future__ import annotations

import bisect
from itertools import accumulate

__all__ = ["CUT_WINDOW", "cut", "overlap"]

# Rows summed per step while looking for a fetch's cut.
CUT_WINDOW = 65_536


def cut(payloads: list[bytes], first: int, last: int, max_bytes: int) -> int:
    """One past the row of ``payloads[first:last]`` whose payload passes ``max_bytes``
    in total (``last`` when none does).

    Sums window by window, in C (accumulate, bisect), so a fetch of a few MB from a
    large range does not sum the sizes of the whole range behind it.
    """
    total = 0
    for start in range(first, last, CUT_WINDOW):
        stop = min(start + CUT_WINDOW, last)
        sizes = list(accumulate(map(len, payloads[start:stop]), initial=total))
        if sizes[-1] >= max_bytes:
            return start + bisect.bisect_left(sizes, max_bytes, 1)
        total = sizes[-1]
    return last


def overlap(start: int, end: int, a: int, b: int) -> int:
    """How many offsets ``[start, end)`` and ``[a, b)`` share."""
    return max(min(end, b) - max(start, a), 0)
