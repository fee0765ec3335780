"""What crosses the pipe to a worker process, and the actor that handles it there.

A batch crosses the pipe as columns (one list per field, pickled once per batch); the
worker answers with a count when every delivery was acked during the handler call, and
with the settlements it saw otherwise, so the common case costs the parent no
per-message decoding.
"""

from __future__ import annotations

import gc
import io
import pickle
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import count, repeat
from operator import itemgetter
from typing import Any

from actors import Actor
from runtime.core._block import Block, Runs
from runtime.core._envelope import ATTRIBUTES, KEY, MESSAGE_ID, PAYLOAD, SEQ, STAMP_TIME, Envelope
from runtime.core.settlement._delivery import ACKED, Delivery, HandOver
from runtime.core.subscribers._member import Handler, run_handler
from runtime.core.subscribers._progress import SlotWriter

__all__ = ["WORKER_COLLECT_AFTER", "Reply", "Settlement", "WorkBatch", "WorkerActor", "dumps_plain"]

# A worker process's first collector threshold: allocations (net) between young
# collections, above what a whole hand-over allocates (a delivery and its envelope per
# message), so that building one runs no collection.
WORKER_COLLECT_AFTER = 10_000

_monotonic = time.monotonic
# The envelope fields a worker needs (ids only where a message has its own).
_SEQ, _PAYLOAD, _KEY = itemgetter(SEQ), itemgetter(PAYLOAD), itemgetter(KEY)
_ATTRIBUTES, _STAMP_TIME, _ID = itemgetter(ATTRIBUTES), itemgetter(STAMP_TIME), itemgetter(MESSAGE_ID)

# (index, acked, reason, error[, cause]): one settlement seen by the worker; a raising
# handler's adds its cause, (exception type, traceback text).
Settlement = tuple[Any, ...]
# What a worker answers: the seconds its handler took on the batch, and the batch's size
# when all of it was acked, else its settlements.
Reply = "tuple[float, int | list[Settlement]]"


@dataclass(frozen=True, slots=True)
class WorkBatch:
    """Deliveries for a worker process, as columns: what crosses the pipe.

    Item ``i`` is the delivery with index ``i``; the columns hold the envelopes' fields
    (``stamps[i]`` is None when ``payloads[i]`` is the published object itself, else
    the message came through a Publisher and ``payloads[i]`` is its data). A column
    whose items are all alike travels as one value: ``keys`` None (no keys),
    ``attributes`` None (all empty), ``attempts`` None (all first attempts), ``stamps``
    one float or None; most hand-overs are like that, and it shrinks what is pickled.
    Messages travel by number (an id is its number in decimal: `message_id`), ``seqs``
    a ``range`` when the numbers follow each other, as most hand-overs' do, and
    ``ids`` None unless a message has an id of its own (a replayed dead letter).

    ``number`` counts the member's hand-overs and ``progress`` names the member's slot
    (`_progress.Progress`) the worker reports in. With ``pickled`` each payload is
    pickled on its own (None: it failed in the parent and is not run): the form a
    hand-over is sent again in when it did not pickle or unpickle whole, so that one
    bad message fails alone.
    """

    subscriber_id: int
    group: str
    topic: str
    seqs: Sequence[int]
    ids: Sequence[str | None] | None
    payloads: Sequence[Any]
    keys: Sequence[str | None] | None
    attributes: Sequence[dict[str, str] | None] | None
    stamps: Sequence[float | None] | float | None
    attempts: Sequence[int] | None
    ack_timeout: float | None = None
    number: int = 0
    progress: tuple[str, int] | None = None
    pickled: bool = False

    @classmethod
    def of(cls, subscriber_id: int, group: str, topic: str,
           deliveries: list[Delivery[Any]], ack_timeout: float | None = None) -> WorkBatch:
        """The columns of ``deliveries`` (in index order)."""
        return cls.of_envelopes(
            subscriber_id, group, topic, [d._envelope for d in deliveries],
            [d._attempt for d in deliveries], ack_timeout,
        )

    @classmethod
    def of_envelopes(cls, subscriber_id: int, group: str, topic: str,
                     envelopes: Sequence[Envelope], attempts: list[int] | None,
                     ack_timeout: float | None = None, number: int = 0,
                     progress: tuple[str, int] | None = None) -> WorkBatch:
        """The columns of ``envelopes`` with their ``attempts`` (None: all first ones).

        A block's columns are taken as they are; other envelopes are read one column at
        a time by an item getter, in C. Numbers that follow each other travel as a
        ``range``; then no message has an id of its own (only a replayed dead letter
        does, and its number is negative), so the ids column is not read.
        """
        ids: list[str | None] | None = None
        if type(envelopes) is Block:
            seqs: Sequence[int] = envelopes.seqs
            payloads, keys = envelopes.payloads, envelopes.keys
            attributes, stamps = envelopes.attributes, envelopes.stamps
        else:
            seqs = list(map(_SEQ, envelopes))
            payloads = list(map(_PAYLOAD, envelopes))
            keys = list(map(_KEY, envelopes))
            attributes = list(map(_ATTRIBUTES, envelopes))
            stamps = list(map(_STAMP_TIME, envelopes))
        size = len(payloads)
        first = seqs[0]
        if type(seqs) is not range and seqs[-1] - first == size - 1 and seqs == list(
                range(first, first + size)):  # checked in C
            seqs = range(first, first + size)
        if type(envelopes) is not Block and (type(seqs) is not range or first <= 0):
            ids = list(map(_ID, envelopes))
            if ids.count(None) == size:
                ids = None
        if stamps is not None and not isinstance(stamps, float) and stamps.count(
                stamps[0]) == size:
            stamps = stamps[0]  # one publish time for all
        return cls(
            subscriber_id, group, topic, seqs, ids, payloads,
            None if keys is None or keys.count(None) == size else keys,
            None if attributes is None or not any(attributes) else attributes,
            stamps, None if attempts is None or attempts.count(1) == size else attempts,
            ack_timeout, number, progress,
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its columns: of Publisher messages (all stamped, bytes data) in one
        plain pickle (no memo: `dumps_plain`), else as they are (not through the
        dataclass's state, which walked its fields in Python on both sides)."""
        columns = (
            self.subscriber_id, self.group, self.topic, self.seqs, self.ids, self.payloads,
            self.keys, self.attributes, self.stamps, self.attempts, self.ack_timeout,
            self.number, self.progress, self.pickled,
        )
        stamps = self.stamps  # of Publisher messages: all are stamped
        if stamps is not None and (isinstance(stamps, float) or None not in (
                stamps.values if type(stamps) is Runs else stamps)):
            plain = dumps_plain(columns, pickle.HIGHEST_PROTOCOL)
            if plain is not None:
                return _from_plain, (plain,)
        return WorkBatch, columns

    def pickled_each(self) -> tuple[WorkBatch, dict[int, str]]:
        """This batch with each payload pickled on its own, and the payloads that do not
        pickle (index -> the error's text; their payload is None)."""
        payloads: list[bytes | None] = []
        failed: dict[int, str] = {}
        for index, payload in enumerate(self.payloads):
            try:
                payloads.append(pickle.dumps(payload, pickle.HIGHEST_PROTOCOL))
            except Exception as exc:
                payloads.append(None)
                failed[index] = _text(exc)
        return replace(self, payloads=payloads, pickled=True), failed

    def unpickled_each(self) -> tuple[WorkBatch, dict[int, str | None]]:
        """A ``pickled`` batch with its payloads loaded, and those not to run (index ->
        the load error's text; None: it failed in the parent already)."""
        payloads: list[Any] = []
        failed: dict[int, str | None] = {}
        for index, data in enumerate(self.payloads):
            if data is None:
                failed[index] = None
                payloads.append(None)
                continue
            try:
                payloads.append(pickle.loads(data))
            except Exception as exc:
                failed[index] = _text(exc)
                payloads.append(None)
        return replace(self, payloads=payloads, pickled=False), failed

    def deliveries(self, handover: HandOver, deadline: float | None = None) -> list[Delivery[Any]]:
        """Rebuild the deliveries on the worker's side, all pending on ``handover``
        (leased until ``deadline``, ``time.monotonic()`` based, if given).

        Every step iterates in C (``zip``, ``map``) but `Delivery.__init__`.
        """
        size = len(self.seqs)
        ids = repeat(None, size) if self.ids is None else self.ids
        keys = repeat(None, size) if self.keys is None else self.keys
        # No attributes: None, as in the parent's envelopes (`Delivery.attributes` reads
        # it as the shared read-only empty dict), not one new dict per message.
        attributes = repeat(None, size) if self.attributes is None else self.attributes
        stamps: Iterable[float | None] = (
            repeat(self.stamps, size) if self.stamps is None or isinstance(self.stamps, float)
            else self.stamps
        )
        attempts = repeat(1, size) if self.attempts is None else self.attempts
        envelopes = zip(self.seqs, ids, self.payloads, keys, attributes,
                        repeat(self.topic, size), stamps, strict=True)
        out: list[Delivery[Any]] = list(map(
            Delivery, envelopes, repeat(handover, size), count(), attempts,
        ))
        handover.hold(dict(enumerate(out)) if deadline is None else _Lease(
            enumerate(out), deadline))
        return out


def _text(exc: BaseException) -> str:
    return f"{type(exc).__qualname__}: {exc}"


def _from_plain(plain: bytes) -> WorkBatch:
    """A `WorkBatch` from its columns pickled by `dumps_plain`."""
    return WorkBatch(*pickle.loads(plain))


class _Collect:
    """The worker-side sink: settlements made during the handler call."""

    def __init__(self) -> None:
        self.settled: list[Delivery[Any]] = []

    def tell(self, message: Any) -> None:
        if isinstance(message, list):
            self.settled.extend(message)
        else:
            self.settled.append(message)


class _Lease(dict[int, Delivery[Any]]):
    """A worker's pending deliveries, which expire together at ``deadline``.

    Past it every claim fails: the worker skips what is left and a late ``ack()`` raises
    `SettlementError` (timed out) instead of succeeding where the parent, whose own
    deadline has passed, would drop it. The deadline is set a margin before the
    parent's, counted from when the worker starts the batch (the parent renews a
    waiting hand-over's deadline when the one before it is answered, which is later).
    """

    def __init__(self, items: Iterable[tuple[int, Delivery[Any]]], deadline: float) -> None:
        super().__init__(items)
        self.deadline = deadline

    # Both checks run once per delivery in a worker: the clock is read inline.
    def __contains__(self, index: object) -> bool:
        if _monotonic() < self.deadline:
            return dict.__contains__(self, index)
        self._expire()
        return False

    def pop(self, index: int, default: Any = None) -> Any:
        if _monotonic() < self.deadline:
            return dict.pop(self, index, default)
        self._expire()
        return default

    def _expire(self) -> None:
        for delivery in self.values():
            delivery._lapse()
        self.clear()


def _deadline(started: float, ack_timeout: float) -> float:
    return started + ack_timeout - min(0.1 * ack_timeout, 0.5)


class WorkerActor(Actor):
    """Runs in a worker process: handles a `WorkBatch`, answers with its settlements.

    Settlements made after the handler returned (from other threads) cannot reach the
    parent; those deliveries settle by their ack deadline, as do the ones the deadline
    reached before the handler did (see `_Lease`). The worker reports each hand-over's
    start and the delivery it runs in its member's progress slot.

    Args:
        handler: the subscriber's handler (cloudpickled once, at spawn).
        auto_ack: ack on return, nack on exception.
    """

    def __init__(self, handler: Handler, auto_ack: bool) -> None:
        super().__init__()
        self._handler = handler
        self._auto_ack = auto_ack
        self._slots: dict[tuple[str, int], SlotWriter] = {}

    def on_start(self) -> None:
        # The process is the group's. A hand-over's deliveries and their envelopes live
        # through its batch; a higher first threshold trades a larger young generation
        # (memory) for fewer collections that walk a batch still in use. Re-measure with
        # `python -m benchmarks --only pipeline_pool` when changing it.
        gc.set_threshold(WORKER_COLLECT_AFTER, *gc.get_threshold()[1:])

    def on_receive(self, message: Any) -> Any:
        """Handle one batch; answers the handler's time and the batch's size if all was
        acked, else the settlements."""
        batch: WorkBatch = message
        failed: dict[int, str | None] = {}
        if batch.pickled:
            batch, failed = batch.unpickled_each()
        sink = _Collect()
        handover = HandOver(sink, batch.subscriber_id, batch.group)
        deliveries = batch.deliveries(handover, None if batch.ack_timeout is None else
                                      _deadline(time.monotonic(), batch.ack_timeout))
        if failed:
            for index in failed:
                dict.pop(handover.pending, index, None)
            deliveries = [d for d in deliveries if d._index not in failed]
        slot = self._slot(batch.progress)
        if slot is not None:  # after the lease's clock read: the parent's deadline is later
            slot.start(batch.number)
        started = time.perf_counter()
        # A handler that ends the process (``sys.exit``) leaves its index in the slot.
        run_handler(self._handler, self._auto_ack, handover, deliveries, log=False,
                    progress=slot)
        if slot is not None:
            slot.done()
        elapsed = time.perf_counter() - started
        settled, sink.settled = sink.settled, []
        # Settled deliveries are answered for and leave no cycle behind (delivery ->
        # hand-over -> sink -> delivery): the batch is freed on return, not by the
        # collector. Each settled one is acked unless the hand-over saw a nack (set
        # before the nacked delivery is sent): no pass over them.
        unloaded = [(i, text) for i, text in failed.items() if text is not None]
        if not unloaded and len(settled) == len(deliveries) and not handover.nacked:
            return elapsed, len(deliveries)
        replies: list[Settlement] = [
            (d._index, d._state is ACKED, d.reason, d.error, *_cause_of(d)) for d in settled
        ]
        replies.extend((index, False, "error", text) for index, text in unloaded)
        return elapsed, replies

    def _slot(self, progress: tuple[str, int] | None) -> SlotWriter | None:
        """The progress slot named ``progress`` (opened once per process)."""
        if progress is None:
            return None
        slot = self._slots.get(progress)
        if slot is None:
            slot = self._slots[progress] = SlotWriter(*progress)
        return slot


def _cause_of(delivery: Delivery[Any]) -> tuple[tuple[str, str], ...]:
    cause = getattr(delivery, "_cause", None)
    return () if cause is None else (cause,)


# Pickling a hand-over's columns without pickle's memo, where that changes nothing.
#
# pickle remembers every object it writes but small atoms (ints, floats, None, booleans):
# a memo entry, and a ``MEMOIZE`` opcode the loading side stores again, so that a second
# reference to the same object is written as a reference. The columns of a hand-over of
# Publisher messages hold no object twice that matters: each message is its own data, so
# the pickler's fast mode (no memo) writes the same stream less the memo's work, on both
# sides (compare with ``python -m benchmarks --only pipeline_pool``).
#
# `dumps_plain` takes fast mode only for plain data: anything but builtin values,
# ``range`` and `Runs` (a user's object, a bytes subclass) makes it give up, and so does
# a cycle (fast mode cannot write one); the caller then pickles as usual.

# Objects the pickler asks about that are plain: ranges, runs, and classes (pickled by
# name: `Runs`' own class, a metaclass instance). Builtin values it writes without asking.
_PLAIN = (range, Runs, type)


class _NotPlain(Exception):
    """An object fast mode may not write as it is (it might be shared or large)."""


class _PlainPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _PLAIN):
            return NotImplemented  # pickled the usual way
        raise _NotPlain


def dumps_plain(obj: Any, protocol: int) -> bytes | None:
    """``obj`` pickled without the memo, or None when it is not plain data (see above)."""
    out = io.BytesIO()
    try:
        pickler = _PlainPickler(out, protocol=protocol)
        pickler.fast = True  # the C pickler's no-memo mode (an instance setting)
        pickler.dump(obj)
    except (_NotPlain, ValueError, RecursionError):  # ValueError: fast mode met a cycle
        return None
    return out.getvalue()
