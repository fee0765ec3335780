"""A group's queues (unkeyed FIFO, one bucket per member, retries): sorting a fan-out
chunk in, taking a member's share out."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain, groupby, islice, repeat
from typing import Any, Protocol

from runtime.core._block import Block, Runs, join_envelopes, keys_of, picker
from runtime.core._envelope import Envelope

__all__ = ["Fifo", "gather_runs", "picked", "sort_by_key", "split_keyed", "take_share"]

# A chunk with fewer key changes than this share of its messages moves run by run.
_RUNS_SHARE = 8


class Fifo:
    """A queue of envelopes, held as the pieces they arrived in (a topic's `Block`s,
    lists): queuing a chunk and taking a hand-over touch no message of their own, and a
    hand-over of blocks leaves as one block (`join_envelopes`). Pieces are never changed
    (the topic shares a chunk between its groups): a partly taken one is read from an
    offset. ``size`` is how many it holds."""

    __slots__ = ("_head", "_pieces", "size")

    def __init__(self) -> None:
        self._pieces: deque[Sequence[Envelope]] = deque()
        self._head = 0  # of the first piece, how many were taken
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Envelope]:
        pieces = iter(self._pieces)
        first = next(pieces, ())
        return chain(islice(first, self._head, None), chain.from_iterable(pieces))

    def extend(self, envelopes: Sequence[Envelope]) -> None:
        """Queue ``envelopes`` (a sequence nobody changes any more) behind the rest."""
        if envelopes:
            self._pieces.append(envelopes)
            self.size += len(envelopes)

    def pieces(self) -> list[Sequence[Envelope]]:
        """The queued pieces in order, the first from where taking stopped."""
        pieces = list(self._pieces)
        if pieces and self._head:
            pieces[0] = pieces[0][self._head:]
        return pieces

    def clear(self) -> None:
        self._pieces.clear()
        self._head = self.size = 0

    def take(self, count: int) -> Sequence[Envelope]:
        """Dequeue up to ``count`` from the front, as one sequence."""
        pieces, head = self._pieces, self._head
        if count >= self.size and not head:  # all of it (most hand-overs): in C
            taken: list[Sequence[Envelope]] = list(pieces)
            pieces.clear()
            self.size = 0
            if len(taken) == 1:  # most hand-overs: one piece, nothing to join
                return taken[0]
            return join_envelopes(taken) if taken else []
        need = min(count, self.size)
        self.size -= need
        taken = []
        while need:
            piece = pieces[0]
            left = len(piece) - head
            if left > need:
                taken.append(piece[head:head + need])
                head += need
                break
            taken.append(piece[head:] if head else piece)
            pieces.popleft()
            head, need = 0, need - left
        self._head = head
        return join_envelopes(taken) if taken else []


def split_keyed(pieces: list[Sequence[Envelope]]) -> tuple[Fifo, list[Envelope]]:
    """``pieces``' unkeyed messages as a `Fifo` and their keyed ones as a list, each in
    order. A piece without keys joins the queue as it is: a group's backlog of blocks is
    not rebuilt message by message when its members change (it was, as one list of
    envelopes, which every later hand-over then read message by message)."""
    queue, keyed = Fifo(), list[Envelope]()
    for piece in pieces:
        keys = keys_of(piece)
        if keys.count(None) == len(keys):
            queue.extend(piece)
            continue
        unkeyed: list[Envelope] = []
        for envelope, key in zip(piece, keys, strict=True):
            (unkeyed if key is None else keyed).append(envelope)
        queue.extend(unkeyed)
    return queue, keyed


class _Queue(Protocol):  # a `Fifo`, or a deque in tests
    def extend(self, envelopes: Sequence[Envelope], /) -> None: ...


def sort_by_key(
    envelopes: Sequence[Envelope], members: list[int], queue: _Queue,
    buckets: dict[int, Fifo] | dict[int, deque[Envelope]],
) -> None:
    """Append unkeyed ``envelopes`` to ``queue`` and keyed ones to the bucket of the
    member their key hashes to (``members``: the members' keys), keeping their order.

    Every key is hashed (once per distinct key, into a key -> queue table) before
    anything moves, so a chunk with a bad key is refused whole. A chunk with one key
    (or none) then moves whole; merged batches' keys (`Runs`, one run each) move run by
    run without a key read (`_move_runs`); other chunks as `_move_each` says.

    Raises:
        Exception: whatever hashing a key raised (e.g. ``TypeError`` for a list).
    """
    keys = keys_of(envelopes)
    alike = keys.count(keys[0]) == len(keys)  # most chunks: no key, or an ordered batch's one
    merged = keys if type(keys) is Runs and not keys.step else None  # read run by run
    count = len(members)
    route: dict[str | None, _Queue] = {
        key: queue if key is None else buckets[members[hash(key) % count]]
        for key in ({keys[0]} if alike else set(merged.values) if merged else set(keys))}
    if alike:
        route[keys[0]].extend(envelopes)
    elif merged and type(envelopes) is Block:  # (only a block's keys are `Runs`)
        _move_runs(envelopes, merged, route)
    else:
        _move_each(envelopes, keys, route)


def _move_runs(block: Block, keys: Runs, route: dict[str | None, _Queue]) -> None:
    """The runs of ``block`` bound for each queue, gathered into one block (`gather_runs`)."""
    chosen = _list_per_queue(route)
    for index, key in enumerate(keys.values):
        chosen[id(route[key])][1].append(index)
    for target, indices in chosen.values():
        target.extend(gather_runs(block, keys, indices))


def _move_each(
    envelopes: Sequence[Envelope], keys: Sequence[str | None], route: dict[str | None, _Queue],
) -> None:
    """Runs of one key (an ordered Publisher sends a batch per key) move as slices, found
    by ``groupby`` over the keys in C; interleaved keys are gathered message by message
    into one list per queue (a block's into one block per queue: `picked`): fewer
    Python-level steps per message than routing each message by its own hash."""
    most = len(keys) // _RUNS_SHARE + 1  # past this many, the runs are not worth reading
    runs = [(key, len(list(run))) for key, run in islice(groupby(keys), most)]
    if len(runs) * _RUNS_SHARE < len(keys):
        start = 0
        for key, size in runs:
            route[key].extend(envelopes[start:start + size])
            start += size
        return
    gathered = _list_per_queue(route)
    lists = {key: gathered[id(target)][1] for key, target in route.items()}
    if type(envelopes) is Block:  # its positions, then its columns picked: no envelope
        for index, key in enumerate(keys):
            lists[key].append(index)
        for target, chosen in gathered.values():
            if chosen:
                target.extend(picked(envelopes, chosen))
        return
    for envelope, key in zip(envelopes, keys, strict=True):
        lists[key].append(envelope)
    for target, items in gathered.values():
        target.extend(items)


def _list_per_queue(route: dict[str | None, _Queue]) -> dict[int, tuple[_Queue, list[Any]]]:
    """An empty list for each queue of ``route``, by the queue's id (keys may share one)."""
    return {id(target): (target, []) for target in route.values()}


def gather_runs(block: Block, keys: Runs, chosen: list[int]) -> Block:
    """The messages of ``block`` in the runs of its ``keys`` (`Runs` of one key each:
    merged batches) numbered ``chosen`` (increasing), as one block.

    A group sends a chunk's runs of a key to their members' queues. Sliced run by run,
    a chunk of many batches made one block per batch, joined again at each hand-over;
    gathered, it is one block whose numbers and keys stay runs.
    """
    ends, seqs, stamps = keys.ends(), block.seqs, block.stamps
    sizes = [keys.counts[i] for i in chosen]
    spans = [(ends[i] - size, ends[i]) for i, size in zip(chosen, sizes, strict=True)]
    numbers = (Runs([seqs.start + start for start, _ in spans], sizes, 1)
               if type(seqs) is range else _gathered(seqs, spans))
    attributes = None if block.attributes is None else _gathered(block.attributes, spans)
    return Block(numbers, _gathered(block.payloads, spans),
                 Runs([keys.values[i] for i in chosen], sizes), attributes, block.topic,
                 stamps if isinstance(stamps, float) else _gathered(stamps, spans))


def picked(block: Block, chosen: list[int]) -> Block:
    """The messages of ``block`` at the positions ``chosen`` (increasing), as one block
    whose columns are picked in C (`picker`)."""
    pick = picker(chosen)
    keys, attributes, stamps = block.keys, block.attributes, block.stamps
    return Block(pick(block.seqs), pick(block.payloads), None if keys is None else pick(keys),
                 None if attributes is None else pick(attributes), block.topic,
                 stamps if isinstance(stamps, float) else pick(stamps))


def _gathered(column: Sequence[Any], spans: list[tuple[int, int]]) -> list[Any]:
    gathered: list[Any] = []
    for start, end in spans:
        gathered += column[start:end]
    return gathered


def take_share(
    bucket: Fifo | None, retries: deque[tuple[Envelope, int]], queue: Fifo, room: int,
    share: int,
) -> tuple[Sequence[Envelope], list[int] | None]:
    """Dequeue a member's keyed messages (its ``bucket``), then ``retries`` and unkeyed
    ones from ``queue`` up to ``share`` more, at most ``room`` in all; returns them and
    their attempts (None: all first ones)."""
    pieces = [bucket.take(room)] if bucket is not None and bucket.size else []
    taken = len(pieces[0]) if pieces else 0
    limit = min(room, taken + share)
    attempts: list[int] | None = None
    if retries and taken < limit:
        attempts = [1] * taken
        retried = []
        while retries and taken < limit:
            envelope, attempt = retries.popleft()
            retried.append(envelope)
            attempts.append(attempt)
            taken += 1
        pieces.append(retried)
    if queue.size and taken < limit:
        unkeyed = queue.take(limit - taken)
        pieces.append(unkeyed)
        if attempts is not None:
            attempts.extend(repeat(1, len(unkeyed)))
    if len(pieces) == 1:  # most hand-overs: one piece, nothing to join
        return pieces[0], attempts
    return (join_envelopes(pieces) if pieces else []), attempts
