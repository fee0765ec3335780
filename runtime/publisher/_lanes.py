"""Lanes: a drained burst of publishes (parallel lists) cut into batches, one lane per key.

Without ``message_ordering`` every message shares the unkeyed lane. With it, each ordering
key has its own lane, and a paused key's messages fail here instead of entering a batch.
"""

from __future__ import annotations

from concurrent.futures import Future

from runtime.core._block import picker
from runtime.core._message import NO_ATTRIBUTES
from runtime.errors import OrderingKeyPausedError
from runtime.publisher._batching import Batch, Batcher, Parts, fail_all
from runtime.publisher._flow_control import FlowGate
from runtime.publisher._sequencer import KeySequencer

__all__ = ["COLUMNS_FROM", "Lanes", "lanes_of"]

# Messages per lane (on average) from which a burst is split into columns per lane
# rather than a row per message: picking five columns and slicing them into batches
# costs a few microseconds per lane, a row tuple per message costs a little per message
# (and, held by the thousand, full garbage collections). Per message, 16 keys
# (`Lanes.add` with its `Batcher`, collector on, best of 7): 256 messages, rows 213-218
# ns, columns 228-231; 320, 209-213 and 205-208; 400, 204-220 and 187-195; 1,000 (a
# window of `FlowControl(1000)`), 202-212 and 164-170; 4,000, 311 and 144.
COLUMNS_FROM = 24


class Lanes:
    """Adds drained messages to their lanes' open batches (the Publisher actor's thread).

    Args:
        batcher: the open batches.
        sequencer: which keys are paused.
        gate: flow control, released for the messages of a paused key.
    """

    def __init__(self, batcher: Batcher, sequencer: KeySequencer, gate: FlowGate) -> None:
        self._batcher = batcher
        self._sequencer = sequencer
        self._gate = gate

    def add(
        self, datas: list[bytes], attributes: list[dict[str, str]], keys: list[str | None],
        futures: list[Future[str]], sizes: list[int], *, ordering: bool,
    ) -> list[Batch]:
        """Add a burst, in publish order per lane; return the batches it closed."""
        if not ordering:
            return self._batcher.add_columns(None, datas, attributes, keys, futures, sizes)
        distinct = set(keys)
        if len(distinct) == 1:
            return self._columns(keys[0], datas, attributes, keys, futures, sizes)
        if len(keys) >= COLUMNS_FROM * len(distinct):
            return self._split_columns(datas, attributes, keys, futures, sizes)
        return self._split_rows(datas, attributes, keys, futures, sizes)

    def _split_columns(
        self, datas: list[bytes], attributes: list[dict[str, str]], keys: list[str | None],
        futures: list[Future[str]], sizes: list[int],
    ) -> list[Batch]:
        """Many messages per lane: pick each lane's columns. A lane's keys are its key,
        and bare publishes share one empty attributes object: those two columns are
        repeated, not picked."""
        closed: list[Batch] = []
        bare = attributes.count(NO_ATTRIBUTES) == len(attributes)
        for key, at in lanes_of(keys).items():
            count, pick = len(at), picker(at)
            closed += self._columns(
                key, pick(datas), [NO_ATTRIBUTES] * count if bare else pick(attributes),
                [key] * count, pick(futures), pick(sizes))
        return closed

    def _split_rows(
        self, datas: list[bytes], attributes: list[dict[str, str]], keys: list[str | None],
        futures: list[Future[str]], sizes: list[int],
    ) -> list[Batch]:
        """Few messages per lane: a row per message."""
        closed: list[Batch] = []
        rows: dict[str | None, list[Parts]] = {}
        for row in zip(datas, attributes, keys, futures, sizes, strict=True):
            rows.setdefault(row[2], []).append(row)
        for key, lane in rows.items():
            if key is not None and self._sequencer.is_paused(key):
                self._refuse(key, [row[3] for row in lane], sum(row[4] for row in lane))
            else:
                closed += self._batcher.add_many(key, lane)
        return closed

    def _columns(
        self, key: str | None, datas: list[bytes], attributes: list[dict[str, str]],
        keys: list[str | None], futures: list[Future[str]], sizes: list[int],
    ) -> list[Batch]:
        if key is not None and self._sequencer.is_paused(key):
            self._refuse(key, futures, sum(sizes))
            return []
        return self._batcher.add_columns(key, datas, attributes, keys, futures, sizes)

    def _refuse(self, key: str, futures: list[Future[str]], nbytes: int) -> None:
        """Fail a paused key's messages and release their capacity."""
        fail_all(futures, OrderingKeyPausedError(key))
        self._gate.release(len(futures), nbytes)


def lanes_of(keys: list[str | None]) -> dict[str | None, list[int]]:
    """The indexes of each key's messages, keys in order of first appearance.

    A key seen before is looked up by subscript (a ``KeyError`` only at a lane's first
    message): 68.5 ns per message against 82.9 with ``dict.get`` and a None check
    (1,400 messages of 16 interleaved keys, timeit, best of seven)."""
    lanes: dict[str | None, list[int]] = {}
    for index, key in enumerate(keys):
        try:
            lanes[key].append(index)
        except KeyError:
            lanes[key] = [index]
    return lanes
