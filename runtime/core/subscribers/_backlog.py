"""A balanced group's queue side: chunks arriving from the topic, sorted in by key."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from operator import itemgetter

from runtime.core._block import Block, join_envelopes
from runtime.core._envelope import SEQ, Envelope
from runtime.core.subscribers._arrivals import Chunk, KeyMark
from runtime.core.subscribers._group_mail import Endpoint
from runtime.core.subscribers._key_routing import Fifo, sort_by_key, split_keyed

__all__ = ["Backlog"]

logger = logging.getLogger(__name__)

_MARK = itemgetter(1)  # of an arrived `Chunk`
_SEQ_OF = itemgetter(SEQ)


class Backlog:
    """The queue half of `GroupActor` (a mixin over its FIFO, buckets and members):
    unkeyed messages wait in one FIFO, keyed ones in a FIFO per member chosen by key
    hash, redeliveries in their own."""

    _name: str
    _queue: Fifo
    _retries: deque[tuple[Envelope, int]]
    _buckets: dict[int, Fifo]
    _members: list[Endpoint]
    _ended: tuple[str, str | None] | None
    _stranded: list[Envelope]
    _settle: Callable[..., None]

    def _accept_arrivals(self, arrived: list[Chunk]) -> None:
        """Queue the chunks that arrived, in order.

        The topic marks each chunk (`KeyMark`), so no key is read here: one without keys
        goes to the FIFO as it is, one of a single key (an ordered Publisher's batch) to
        that key's member. A burst of one-at-a-time publishes (one-message chunks, not
        blocks) is joined first: without keys it is queued as one piece, with mixed keys
        sorted as one (per 2,000 such publishes into ``workers=2`` the group's CPU fell
        from 8.0-9.5 to 6.5-8.7 ms, /tmp/p40/grpab.py, and from 5.8-6.2 to 4.2-4.6 ms).
        Unless a key does not hash (`sort_by_key` hashes every key before it moves
        anything): then chunk by chunk, so only that key's own chunk is refused (with
        fewer than two members nothing is hashed or checked).
        """
        chunks = [chunk for chunk, _ in arrived]
        marks = list(map(_MARK, arrived))
        keyed = marks.count(False) != len(marks)
        burst = len(chunks) > 1 and Block not in map(type, chunks)
        if burst and not keyed:
            chunks = [join_envelopes(chunks)]
        if keyed and self._ended is None and len(self._members) > 1:  # keys to route
            if True not in marks:
                self._route(chunks, marks)
                return
            if burst and self._sorted(join_envelopes(chunks)):
                return
        for index, chunk in enumerate(chunks):
            try:
                self._accept(chunk, keyed)
            except Exception:  # what it took and did not queue is nowhere else
                self._strand(chunk, chunks[index + 1:])
                raise

    def _strand(self, failed: Sequence[Envelope], later: list[Sequence[Envelope]]) -> None:
        """Keep what a failed acceptance took and did not queue, and the chunks after it."""
        held = set(map(_SEQ_OF, self._queue))
        held.update(e[SEQ] for bucket in self._buckets.values() for e in bucket)
        self._stranded = [e for e in failed if e[SEQ] not in held]
        self._stranded.extend(e for chunk in later for e in chunk)

    def _route(self, chunks: list[Sequence[Envelope]], marks: list[KeyMark]) -> None:
        """Queue chunks of no key or of one key each whole, as `sort_by_key` would
        route their messages. With 16 keys, sorting read every key of every chunk."""
        members = [m.key for m in self._members]
        queue, buckets, count = self._queue, self._buckets, len(members)
        for chunk, mark in zip(chunks, marks, strict=True):
            if mark is False:
                queue.extend(chunk)
            else:  # a str: hashing it cannot fail
                buckets[members[hash(mark) % count]].extend(chunk)

    def _sorted(self, merged: Sequence[Envelope]) -> bool:
        """Sort a merged burst of keyed chunks in; False (nothing moved) when a key does
        not hash. Checking that every key hashes first read every key twice: 5% of the
        group thread's samples with 16 keys (py-spy)."""
        try:
            sort_by_key(merged, [m.key for m in self._members], self._queue, self._buckets)
        except Exception:
            return False
        return True

    def _accept(self, envelopes: Sequence[Envelope], keyed: bool = True) -> None:
        if self._ended is not None:
            self._settle([(e, 1) for e in envelopes], *self._ended)
            return
        members = self._members
        # Unkeyed messages may go to any member; for one member, one FIFO keeps key order.
        if not keyed or len(members) < 2 or not envelopes:
            self._queue.extend(envelopes)
            return
        try:  # every key hashed before anything moves: a bad chunk is refused whole
            sort_by_key(envelopes, [m.key for m in members], self._queue, self._buckets)
        except Exception as exc:  # a key that slipped past the boundary's check
            logger.error("group %r refused %d messages: %r", self._name, len(envelopes), exc)
            # "dropped", not "error": a retry would meet the same key (and loop).
            self._settle([(e, 1) for e in envelopes], "dropped", f"unhashable key: {exc}")
            return

    def _requeue(self, items: tuple[tuple[Envelope, int], ...]) -> None:
        if self._ended is not None:
            self._settle(list(items), *self._ended)
        else:
            self._retries.extend(items)

    def _rebucket(self) -> None:
        """Re-route keyed messages after a membership change (per-key order kept); the
        queue's pieces without keys stay as they are."""
        self._queue, keyed = split_keyed(self._queue.pieces())
        for bucket in self._buckets.values():
            keyed.extend(bucket)
        self._buckets = {m.key: Fifo() for m in self._members}
        if len(self._members) > 1:
            self._accept(keyed)
        else:
            self._queue.extend(keyed)
