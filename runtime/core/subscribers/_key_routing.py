"""A group's queues (unkeyed FIFO, one bucket per member, retries): sorting a fan-out
chunk in, taking a member's share out."""

from __future__ import annotations

from collections import deque
from itertools import groupby, islice, repeat
from operator import itemgetter, ne

from runtime.core._envelope import KEY, Envelope

__all__ = ["sort_by_key", "take_share"]

_KEY_OF = itemgetter(KEY)
# A chunk with fewer key changes than this share of its messages moves run by run.
_RUNS_SHARE = 8


def sort_by_key(
    envelopes: list[Envelope], members: list[int], queue: deque[Envelope],
    buckets: dict[int, deque[Envelope]],
) -> None:
    """Append unkeyed ``envelopes`` to ``queue`` and keyed ones to the bucket of the
    member their key hashes to (``members``: the members' keys), keeping their order.

    Every key is hashed (once per distinct key, into a key -> queue table) before
    anything moves, so a chunk with a bad key is refused whole. A chunk with one key
    (or none) then moves in one call; runs of one key (an ordered Publisher sends a
    batch per key, and the topic merges a few into one chunk) move run by run, walked
    by ``groupby`` in C; interleaved keys move message by message. Per message (a
    chunk of 106, two members), against routing each message by its own hash: runs of
    35 0.15 -> 0.10 µs, 16 interleaved keys 0.155 -> 0.12-0.13, no key 0.04.

    Raises:
        Exception: whatever hashing a key raised (e.g. ``TypeError`` for a list).
    """
    keys = list(map(_KEY_OF, envelopes))
    count = len(members)
    alike = keys.count(keys[0]) == len(keys)  # most chunks: no key, or an ordered batch's one
    route = {key: queue if key is None else buckets[members[hash(key) % count]]
             for key in ({keys[0]} if alike else set(keys))}
    if alike:
        route[keys[0]].extend(envelopes)
    elif sum(map(ne, keys, islice(keys, 1, None))) * _RUNS_SHARE < len(keys):
        for key, run in groupby(envelopes, _KEY_OF):
            route[key].extend(run)
    else:
        for envelope, key in zip(envelopes, keys, strict=True):
            route[key].append(envelope)


def take_share(
    bucket: deque[Envelope] | None, retries: deque[tuple[Envelope, int]],
    queue: deque[Envelope], room: int, share: int,
) -> tuple[list[Envelope], list[int] | None]:
    """Dequeue a member's keyed messages (its ``bucket``), then ``retries`` and unkeyed
    ones from ``queue`` up to ``share`` more, at most ``room`` in all; returns them and
    their attempts (None: all first ones)."""
    envelopes = _take(bucket, room) if bucket else []
    attempts: list[int] | None = None
    limit = min(room, len(envelopes) + share)
    if retries and len(envelopes) < limit:
        attempts = [1] * len(envelopes)
        while retries and len(envelopes) < limit:
            envelope, attempt = retries.popleft()
            envelopes.append(envelope)
            attempts.append(attempt)
    start = len(envelopes)
    if queue and start < limit:
        taken = _take(queue, limit - start)
        envelopes = taken if not envelopes else envelopes + taken
        if attempts is not None:
            attempts.extend(repeat(1, len(envelopes) - start))
    return envelopes, attempts


def _take(items: deque[Envelope], count: int) -> list[Envelope]:
    """Dequeue up to ``count`` from the front of ``items``: the whole deque in one C call
    when it fits (most hand-overs; 616 messages 17.2 -> 3.9 µs), else one by one."""
    if count >= len(items):
        taken = list(items)
        items.clear()
        return taken
    popleft = items.popleft
    return [popleft() for _ in range(count)]
