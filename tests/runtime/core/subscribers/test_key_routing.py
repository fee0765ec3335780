"""sort_by_key: a chunk into the unkeyed FIFO and per-member buckets, order kept."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from runtime.core.subscribers._group import sort_by_key

MEMBERS = [1, 2]


def _envelopes(keys: list[str | None]) -> list[Any]:
    return [(n, str(n), n, key, None, "t", None) for n, key in enumerate(keys)]


def _sorted(keys: list[str | None]) -> tuple[list[int], dict[int, list[int]]]:
    queue: deque[Any] = deque()
    buckets: dict[int, deque[Any]] = {m: deque() for m in MEMBERS}
    sort_by_key(_envelopes(keys), MEMBERS, queue, buckets)
    return [e[0] for e in queue], {m: [e[0] for e in b] for m, b in buckets.items()}


def _expected(keys: list[str | None]) -> tuple[list[int], dict[int, list[int]]]:
    queue = [n for n, key in enumerate(keys) if key is None]
    buckets: dict[int, list[int]] = {m: [] for m in MEMBERS}
    for n, key in enumerate(keys):
        if key is not None:
            buckets[MEMBERS[hash(key) % len(MEMBERS)]].append(n)
    return queue, buckets


@pytest.mark.parametrize("keys", [
    [None] * 50,                                            # no key: one call
    ["a"] * 50,                                             # one key: one call
    [f"k{(n // 10) % 4}" for n in range(80)],               # runs (an ordered Publisher)
    [f"k{n % 16}" if n % 3 else None for n in range(90)],   # interleaved, some unkeyed
    [None, "a", "a", None, "b", "b", "b", None],            # runs with unkeyed between
])
def test_every_message_lands_where_its_key_hashes_in_publish_order(keys: list[str | None]) -> None:
    assert _sorted(keys) == _expected(keys)


@pytest.mark.parametrize("run", [1, 10])  # interleaved keys, runs of one key
@pytest.mark.parametrize("bad_at", [0, 5, 49])
def test_an_unhashable_key_refuses_the_chunk_before_anything_moves(bad_at: int, run: int) -> None:
    keys: list[Any] = [f"k{(n // run) % 4}" for n in range(50)]
    keys[bad_at] = ["not", "hashable"]
    queue: deque[Any] = deque()
    buckets: dict[int, deque[Any]] = {m: deque() for m in MEMBERS}

    with pytest.raises(TypeError):
        sort_by_key(_envelopes(keys), MEMBERS, queue, buckets)

    assert not queue and not any(buckets.values())
