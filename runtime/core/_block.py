"""Publisher messages accepted together, kept as columns (`Block`) from the topic to a
worker's batch, and the runs (`Runs`) a joined block keeps its columns in."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain, repeat
from operator import add, itemgetter
from typing import Any, overload

from runtime.core._envelope import KEY, Envelope, message_id, message_ids

__all__ = ["Block", "Runs", "any_keyed", "ids_of", "join_envelopes", "keys_of", "picker"]

_KEY_OF = itemgetter(KEY)


class Block(Sequence[Envelope]):
    """Publisher messages accepted together, kept as columns: the envelopes they stand
    for are built only where one is read (`__getitem__`, `__iter__`).

    The path from a Publisher batch to a worker process reads no message on its own: the
    topic stamps a batch as one block, a group queues and hands over blocks (joined,
    `join`), and a worker's `WorkBatch` takes their columns as they are: no object per
    message is built, read back into columns or collected on that path.

    A block keeps the lists it is given, and its readers share them (a chunk goes to
    every group): whoever builds one hands its lists over and never changes them.

    Args:
        seqs: the messages' numbers (their ids: `message_id`), a ``range`` when they
            follow each other.
        payloads: their data.
        keys: their ordering keys (None: none has one).
        attributes: their attributes, None for none (None: none has any).
        topic: the topic's name.
        stamps: their publish time, one for all or one each.
    """

    __slots__ = ("attributes", "keys", "payloads", "seqs", "stamps", "topic")

    def __init__(
        self, seqs: Sequence[int], payloads: list[Any], keys: Sequence[str | None] | None,
        attributes: Sequence[dict[str, str] | None] | None, topic: str,
        stamps: float | Sequence[float],
    ) -> None:
        self.seqs = seqs
        self.payloads = payloads
        self.keys = keys
        self.attributes = attributes
        self.topic = topic
        self.stamps = stamps

    def __len__(self) -> int:
        return len(self.payloads)

    @overload
    def __getitem__(self, index: int) -> Envelope: ...
    @overload
    def __getitem__(self, index: slice) -> Block: ...
    def __getitem__(self, index: int | slice) -> Envelope | Block:
        keys, attributes, stamps = self.keys, self.attributes, self.stamps
        if isinstance(index, slice):
            return Block(
                self.seqs[index], self.payloads[index], None if keys is None else keys[index],
                None if attributes is None else attributes[index], self.topic,
                stamps if isinstance(stamps, float) else stamps[index])
        return (self.seqs[index], None, self.payloads[index],
                None if keys is None else keys[index],
                None if attributes is None else attributes[index], self.topic,
                stamps if isinstance(stamps, float) else stamps[index])

    def __iter__(self) -> Iterator[Envelope]:
        size, stamps = len(self.payloads), self.stamps
        return zip(
            self.seqs, repeat(None, size), self.payloads,
            repeat(None, size) if self.keys is None else self.keys,
            repeat(None, size) if self.attributes is None else self.attributes,
            repeat(self.topic, size), repeat(stamps, size) if isinstance(stamps, float) else stamps,
            strict=True,
        )

    def __repr__(self) -> str:
        return f"Block({self.seqs!r}, {len(self)} messages)"

    @staticmethod
    def join(blocks: Sequence[Block]) -> Block:
        """One block of ``blocks``' messages in order (one topic's); each column is
        joined in C, and stays one value where every block's is (no keys, no
        attributes, one publish time, numbers that follow each other)."""
        topic = blocks[0].topic
        blocks = [block for block in blocks if block.payloads]
        if not blocks:
            return Block(range(0), [], None, None, topic, 0.0)
        payloads: list[Any] = []
        for block in blocks:
            payloads += block.payloads
        return Block(
            _joined_seqs(blocks), payloads, _joined_keys(blocks),
            _joined_list([b.attributes for b in blocks], blocks), topic,
            _joined_stamps(blocks),
        )


def _joined_seqs(blocks: Sequence[Block]) -> Sequence[int]:
    """The numbers: one range when they follow each other, else `Runs` of the ranges and
    runs (an ordered Publisher's keys interleave; a group's share of them,
    `gather_runs`), else one list."""
    starts: list[int] = []
    counts: list[int] = []
    for block in blocks:
        seqs = block.seqs
        if type(seqs) is range:
            starts.append(seqs.start)
            counts.append(len(seqs))
        elif type(seqs) is Runs and seqs.step == 1:
            starts += seqs.values
            counts += seqs.counts
        else:
            return list(chain.from_iterable(b.seqs for b in blocks))
    if starts == list(accumulate(counts[:-1], initial=starts[0])):
        return range(starts[0], starts[-1] + counts[-1])
    return Runs(starts, counts, 1)


def _joined_keys(blocks: Sequence[Block]) -> Sequence[str | None] | None:
    """The keys: `Runs` when each block has one key or none (an ordered Publisher's
    batches) or keeps its keys as runs (a group's share of them, `gather_runs`), else
    as `_joined_list`."""
    columns = [b.keys for b in blocks]
    if columns.count(None) == len(columns):
        return None
    values: list[str | None] = []
    counts: list[int] = []
    for column, block in zip(columns, blocks, strict=True):
        size = len(block.payloads)
        if type(column) is Runs and not column.step:
            values += column.values
            counts += column.counts
        elif column is None or column.count(column[0]) == size:
            values.append(None if column is None else column[0])
            counts.append(size)
        else:
            joined: list[str | None] = _joined_list(columns, blocks)
            return joined
    return Runs(values, counts)


def _joined_list(columns: list[Any], blocks: Sequence[Block]) -> Any:
    """A column as one list (None when no block has one). Attributes are never runs: a
    run would hand one dict to several messages."""
    if columns.count(None) == len(columns):
        return None
    joined: list[Any] = []
    for column, block in zip(columns, blocks, strict=True):
        joined += [None] * len(block.payloads) if column is None else column
    return joined


def _joined_stamps(blocks: Sequence[Block]) -> float | Sequence[float]:
    stamps = [b.stamps for b in blocks]
    first = stamps[0]
    if isinstance(first, float) and stamps.count(first) == len(stamps):
        return first
    if all(isinstance(stamp, float) for stamp in stamps):
        return Runs(stamps, [len(b.payloads) for b in blocks])
    joined: list[float] = []
    for stamp, block in zip(stamps, blocks, strict=True):
        joined += [stamp] * len(block.payloads) if isinstance(stamp, float) else stamp
    return joined


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


def picker(indexes: list[int]) -> Callable[[Sequence[Any]], list[Any]]:
    """A function giving the items of a column at ``indexes``, in that order: one
    ``itemgetter`` call per column, not a ``__getitem__`` call per item."""
    if len(indexes) < 2:  # an itemgetter of one index returns the item, not a tuple
        return lambda column: [column[index] for index in indexes]
    get = itemgetter(*indexes)
    return lambda column: list(get(column))


def join_envelopes(pieces: Sequence[Sequence[Envelope]]) -> Sequence[Envelope]:
    """``pieces`` as one sequence, in order: one `Block` when all are blocks."""
    if len(pieces) == 1:
        return pieces[0]
    if all(type(piece) is Block for piece in pieces):
        return Block.join(pieces)  # type: ignore[arg-type]
    return list(chain.from_iterable(pieces))


def keys_of(envelopes: Sequence[Envelope]) -> Sequence[str | None]:
    """The keys of ``envelopes``, in order (a block's own column: read, never change it)."""
    if type(envelopes) is Block:
        keys = envelopes.keys
        return [None] * len(envelopes.payloads) if keys is None else keys
    return list(map(_KEY_OF, envelopes))


def any_keyed(envelopes: Sequence[Envelope]) -> bool:
    """Whether any of ``envelopes`` has a key."""
    if type(envelopes) is Block:
        keys = envelopes.keys
        return keys is not None and keys.count(None) != len(keys)
    return any(map(_KEY_OF, envelopes))


def ids_of(envelopes: Sequence[Envelope]) -> Sequence[str]:
    """The ids of ``envelopes`` in order. A block's are its numbers (none has an id of its
    own), spelled from the suffix table (`message_ids`) when they follow each other."""
    if type(envelopes) is Block:
        seqs = envelopes.seqs
        if type(seqs) is range:
            return message_ids(seqs.start, len(seqs))
        if type(seqs) is Runs and seqs.step == 1 and len(seqs.values) == 1:
            return message_ids(seqs.values[0], len(seqs))  # a slice of joined staged parts
        return list(map(str, seqs))
    return list(map(message_id, envelopes))
