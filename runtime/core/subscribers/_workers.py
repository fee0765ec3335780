"""Process members: a Pool of worker processes running a group's handler on batches.

A batch crosses the pipe as columns (one list per field, pickled once per batch); the
worker answers with a count when every delivery was acked during the handler call, and
with the settlements it saw otherwise, so the common case costs the parent no
per-message decoding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from actors import Actor, Ref
from runtime.core.settlement._delivery import ACKED, Delivery, HandOver, all_acked
from runtime.core.subscribers._group import Credit
from runtime.core.subscribers._member import Handler, run_handler

__all__ = [
    "FIRST_BATCH", "PROCESS_BATCH", "SPLIT_WORTH", "ProcessEndpoint", "WorkBatch", "WorkerActor",
]

logger = logging.getLogger(__name__)

# Hand-overs a worker process holds at once: one it runs, one waiting behind it. What
# arrives meanwhile waits in the group and leaves as the next, larger hand-over.
PROCESS_HANDOVERS = 2
# The most deliveries in one hand-over (one pickled batch), and in the first ones, sent
# before the worker's handler time is known (a slow handler must not get a batch that
# outlives its ack deadline).
PROCESS_BATCH = 256
FIRST_BATCH = 4
# Of the ack timeout, the share one hand-over's handler time may fill.
_DEADLINE_SHARE = 0.25

# (index, acked, reason, error): one settlement seen by the worker.
Settlement = tuple[int, bool, "str | None", "str | None"]
# What a worker answers: the seconds its handler took on the batch, and the batch's size
# when all of it was acked, else its settlements.
Reply = "tuple[float, int | list[Settlement]]"

# Handler time under which a batch is not worth splitting across workers: a hand-over
# costs the parent about 70 µs (build, pickle, pipe write, answer), so a split that
# saves less than this in the slower half only adds hand-overs.
SPLIT_WORTH = 200e-6
_COST_WEIGHT = 0.25  # of the newest batch in the running per-message handler time


@dataclass(frozen=True, slots=True)
class WorkBatch:
    """Deliveries for a worker process, as columns: what crosses the pipe.

    Item ``i`` is the delivery with index ``i``; the columns hold the envelopes' fields
    (``stamps[i]`` is None when ``payloads[i]`` is the published object itself, else
    the message came through a Publisher and ``payloads[i]`` is its data). A column
    whose items are all alike travels as one value: ``keys`` None (no keys),
    ``attributes`` None (all empty), ``attempts`` None (all first attempts), ``stamps``
    one float or None; most hand-overs are like that, and it halves what is pickled.
    """

    subscriber_id: int
    group: str
    topic: str
    ids: Sequence[str]
    payloads: Sequence[Any]
    keys: Sequence[str | None] | None
    attributes: Sequence[dict[str, str]] | None
    stamps: Sequence[float | None] | float | None
    attempts: Sequence[int] | None
    ack_timeout: float | None = None

    @classmethod
    def of(cls, subscriber_id: int, group: str, topic: str,
           deliveries: list[Delivery[Any]], ack_timeout: float | None = None) -> WorkBatch:
        """The columns of ``deliveries`` (in index order)."""
        _, ids, payloads, keys, attributes, _, stamps = zip(
            *[d._envelope for d in deliveries], strict=True,
        )
        attempts = [d._attempt for d in deliveries]
        count = len(deliveries)
        first_stamp = stamps[0]
        return cls(
            subscriber_id, group, topic, ids, payloads,
            None if keys.count(None) == count else keys,
            None if attributes.count({}) == count else attributes,
            first_stamp if stamps.count(first_stamp) == count else stamps,
            None if attempts.count(1) == count else attempts,
            ack_timeout,
        )

    def deliveries(self, handover: HandOver) -> list[Delivery[Any]]:
        """Rebuild the deliveries on the worker's side, all pending on ``handover``."""
        topic, count = self.topic, len(self.ids)
        keys = repeat(None, count) if self.keys is None else self.keys
        attributes = (
            ({} for _ in range(count)) if self.attributes is None else self.attributes
        )
        stamps: Iterable[float | None] = (
            repeat(self.stamps, count) if self.stamps is None or isinstance(self.stamps, float)
            else self.stamps
        )
        attempts = repeat(1, count) if self.attempts is None else self.attempts
        out: list[Delivery[Any]] = [
            Delivery((0, message_id, payload, key, attrs, topic, stamp), handover, index, attempt)
            for index, (message_id, payload, key, attrs, stamp, attempt) in enumerate(zip(
                self.ids, self.payloads, keys, attributes, stamps, attempts, strict=True,
            ))
        ]
        handover.pending = dict(enumerate(out))
        return out


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

    def __init__(self, items: dict[int, Delivery[Any]], deadline: float) -> None:
        super().__init__(items)
        self.deadline = deadline

    def __contains__(self, index: object) -> bool:
        return not self._expired() and super().__contains__(index)

    def pop(self, index: int, default: Any = None) -> Any:
        if self._expired():
            return default
        return super().pop(index, default)

    def _expired(self) -> bool:
        if time.monotonic() < self.deadline:
            return False
        for delivery in self.values():
            delivery._set_nacked("timeout", None, timed_out=True)
        self.clear()
        return True


def _deadline(started: float, ack_timeout: float) -> float:
    return started + ack_timeout - min(0.1 * ack_timeout, 0.5)


class WorkerActor(Actor):
    """Runs in a worker process: handles a `WorkBatch`, answers with its settlements.

    Settlements made after the handler returned (from other threads) cannot reach the
    parent; those deliveries settle by their ack deadline, as do the ones the deadline
    reached before the handler did (see `_Lease`).

    Args:
        handler: the subscriber's handler (cloudpickled once, at spawn).
        auto_ack: ack on return, nack on exception.
    """

    def __init__(self, handler: Handler, auto_ack: bool) -> None:
        super().__init__()
        self._handler = handler
        self._auto_ack = auto_ack

    def on_receive(self, message: Any) -> Any:
        """Handle one batch; answers the handler's time and the batch's size if all was
        acked, else the settlements."""
        batch: WorkBatch = message
        sink = _Collect()
        handover = HandOver(sink, batch.subscriber_id, batch.group)
        deliveries = batch.deliveries(handover)
        if batch.ack_timeout is not None:
            handover.pending = _Lease(
                handover.pending, _deadline(time.monotonic(), batch.ack_timeout),
            )
        started = time.perf_counter()
        run_handler(self._handler, self._auto_ack, handover, deliveries)
        elapsed = time.perf_counter() - started
        settled = sink.settled
        if len(settled) == len(deliveries) and all_acked(settled):
            return elapsed, len(deliveries)
        return elapsed, [(d._index, d._state is ACKED, d.reason, d.error) for d in settled]


class ProcessEndpoint:
    """The group's view of one pool member: each batch is one ask to the worker.

    Args:
        key: its endpoint key in the group.
        subscriber_id: the subscription's id.
        worker: the worker process's actor.
        group: the group actor (credit goes back there).
        tracker: the tracker actor (settlements go there).
        prefetch: deliveries it may hold unsettled (None: two full hand-overs).
        ack_timeout: the topic's ack timeout (bounds a hand-over's expected run time).
        renew: extends a hand-over's ack deadline (when the worker starts on it).
    """

    handovers: int | None = PROCESS_HANDOVERS

    def __init__(
        self, key: int, subscriber_id: int, worker: Ref, group: Ref, tracker: Ref,
        prefetch: int | None = None, ack_timeout: float | None = None,
        renew: Callable[[HandOver], None] | None = None,
    ) -> None:
        self.key = key
        self.subscriber_id = subscriber_id
        self.window = PROCESS_HANDOVERS * PROCESS_BATCH if prefetch is None else prefetch
        self._worker = worker
        self._group = group
        self._tracker = tracker
        self._ack_timeout = ack_timeout
        self._renew = renew
        self._running: list[HandOver] = []  # in flight, in the order the worker takes them
        self._cost: float | None = None  # running handler seconds per message

    def cap(self) -> int:
        """The most deliveries for one hand-over: few until the handler's time is known,
        then as many as fill a quarter of the ack timeout (at most `PROCESS_BATCH`)."""
        cost = self._cost
        if cost is None:
            return FIRST_BATCH
        if self._ack_timeout is None or cost <= 0:
            return PROCESS_BATCH
        return max(1, min(PROCESS_BATCH, int(self._ack_timeout * _DEADLINE_SHARE / cost)))

    def prefers_whole(self, count: int) -> bool:
        """True once this worker's handler is known to take ``count`` messages in less
        than `SPLIT_WORTH` (unknown: split, the safe choice for slow handlers)."""
        cost = self._cost
        return cost is not None and cost * count < SPLIT_WORTH

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Ask the worker to handle the batch; settle from its answer (never blocks)."""
        topic = deliveries[0].topic
        batch = WorkBatch.of(
            self.subscriber_id, handover.group or "", topic, deliveries, self._ack_timeout,
        )
        try:
            future = self._worker.ask(batch, timeout=None)
        except Exception as exc:  # e.g. a payload that does not pickle
            self._fail(handover, deliveries, "error", str(exc) or type(exc).__name__)
            return
        self._running.append(handover)  # only the answer callbacks remove (one I/O thread)
        future.add_done_callback(self._answered(handover, deliveries))

    def _started_next(self, handover: HandOver) -> None:
        """``handover`` was answered: the worker now runs the next one, whose ack
        deadline starts over (it waited in the worker's mailbox until now)."""
        running = self._running
        if handover in running:
            running.remove(handover)
        if running and self._renew is not None:
            self._renew(running[0])

    def _answered(
        self, handover: HandOver, deliveries: list[Delivery[Any]],
    ) -> Callable[[Future[Any]], None]:
        def done(future: Future[Any]) -> None:
            self._started_next(handover)
            error = future.exception()
            if error is not None:
                logger.info("worker of subscriber %s failed: %s", self.subscriber_id, error)
                self._fail(handover, deliveries, "worker_crashed", str(error))
                return
            elapsed, reply = future.result()
            per_message = elapsed / len(deliveries)
            cost = self._cost
            self._cost = per_message if cost is None else cost + (per_message - cost) * _COST_WEIGHT
            if type(reply) is int:
                self._finish(_claim_acked(handover, deliveries), len(deliveries))
            else:
                self._finish(_claim_settled(deliveries, reply), len(deliveries))

        return done

    def _fail(
        self, handover: HandOver, deliveries: list[Delivery[Any]], reason: str, error: str,
    ) -> None:
        settled = []
        for delivery in deliveries:
            if delivery._claim():
                delivery._set_nacked(reason, error)
                settled.append(delivery)
        self._finish(settled, len(deliveries))

    def _finish(self, settled: list[Delivery[Any]], count: int) -> None:
        if settled:
            self._tracker.tell(settled)
        self._group.tell(Credit(self.key, count, 1))


def _claim_acked(handover: HandOver, deliveries: list[Delivery[Any]]) -> list[Delivery[Any]]:
    """Claim every delivery the parent still holds as acked (their deadline may have won)."""
    pop = handover.pending.pop
    claimed = [d for d in deliveries if pop(d._index, None) is not None]
    for delivery in claimed:
        delivery._state = ACKED
    return claimed


def _claim_settled(
    deliveries: list[Delivery[Any]], settlements: list[Settlement],
) -> list[Delivery[Any]]:
    """Claim and settle the deliveries the worker reported; the rest wait for deadlines."""
    settled = []
    for index, acked, reason, text in settlements:
        delivery = deliveries[index]
        if not delivery._claim():
            continue  # its deadline or the close sweep won
        if acked:
            delivery._state = ACKED
        else:
            delivery._set_nacked(reason or "nack", text)
        settled.append(delivery)
    return settled
