"""Sorting a fan-out chunk into a group's queues: unkeyed FIFO, one bucket per member."""

from __future__ import annotations

from collections import deque
from itertools import groupby, islice
from operator import itemgetter, ne

from runtime.core._envelope import KEY, Envelope

__all__ = ["sort_by_key"]

_KEY_OF = itemgetter(KEY)
# A chunk with fewer key changes than this share of its messages moves run by run.
_RUNS_SHARE = 8


def sort_by_key(
    envelopes: list[Envelope], members: list[int], queue: deque[Envelope],
    buckets: dict[int, deque[Envelope]],
) -> None:
    """Append unkeyed ``envelopes`` to ``queue`` and keyed ones to the bucket of the
    member their key hashes to (``members``: the members' keys), keeping their order.

    Every key is hashed before anything moves, so a chunk with a bad key is refused
    whole. A chunk with no key or one moves in one call. Runs of one key (an ordered
    Publisher sends a batch per key, and the topic merges a few into one chunk) move
    run by run, walked by ``groupby`` in C; interleaved keys move message by message
    through a key -> bucket table built once per chunk. Per message, against routing
    each message by its own hash: 0.15 -> 0.10 µs for runs of 35, 0.155 -> 0.12-0.14
    for 16 interleaved keys (a chunk of 106, two members; groupby alone took 0.30 on
    interleaved keys).

    Raises:
        Exception: whatever hashing a key raised (e.g. ``TypeError`` for a list).
    """
    keys = list(map(_KEY_OF, envelopes))
    count, first = len(members), keys[0]
    if keys.count(first) == len(keys):  # no key, or one: the chunk moves in one call
        (queue if first is None else buckets[members[hash(first) % count]]).extend(envelopes)
        return
    if sum(map(ne, keys, islice(keys, 1, None))) * _RUNS_SHARE < len(keys):
        runs = [(key, list(run)) for key, run in groupby(envelopes, _KEY_OF)]
        targets = [queue if key is None else buckets[members[hash(key) % count]]
                   for key, _ in runs]
        for (_, run), target in zip(runs, targets, strict=True):
            target.extend(run)
        return
    route = {key: buckets[members[hash(key) % count]] for key in set(keys) if key is not None}
    for envelope, key in zip(envelopes, keys, strict=True):
        (queue if key is None else route[key]).append(envelope)
