"""Process members: a Pool of worker processes running a group's handler on batches.

The parent's side: each worker is one `ProcessEndpoint` of the group, holding at most
two hand-overs; what crosses the pipe and runs in the worker is in `_work_batch`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, cast

from actors import Ref
from runtime.core._envelope import TOPIC
from runtime.core.settlement._delivery import ACKED, Delivery, HandOver
from runtime.core.settlement._tranche import Tranche
from runtime.core.subscribers._group_mail import Credit
from runtime.core.subscribers._work_batch import Settlement, WorkBatch, WorkerActor

__all__ = [
    "FIRST_BATCH", "HANDOVER_BYTES", "HANDOVER_WORK", "PROCESS_BATCH", "SLOW_BATCH",
    "SPLIT_WORTH", "ProcessEndpoint", "WorkBatch", "WorkerActor", "payload_size",
]

logger = logging.getLogger(__name__)

# Hand-overs a worker process holds at once: one it runs, one waiting behind it. What
# arrives meanwhile waits in the group and leaves as the next, larger hand-over.
PROCESS_HANDOVERS = 2
# The most deliveries in one hand-over (one pickled batch); a hand-over is sized to about
# `HANDOVER_WORK` of handler time, between `SLOW_BATCH` and this. The first ones, sent
# before the worker's handler time is known, hold `FIRST_BATCH` (a slow handler must not
# get a batch that outlives its ack deadline). Each hand-over costs the parent a round
# of thread wake-ups (answer, credit, the topic's gate, the Publisher's confirmation), and
# a wake-up costs a thread ~20 µs of CPU on a 2-vCPU VM: 4,096 rather than 1,024 took
# `pipeline_pool` from 348-367k to 381-394k msg/s (three alternated runs).
PROCESS_BATCH = 4096
SLOW_BATCH = 256
FIRST_BATCH = 4
# Handler time one hand-over is sized to: cheap handlers get large hand-overs (the
# parent's cost is per hand-over), slow ones no fewer than `SLOW_BATCH` messages.
HANDOVER_WORK = 0.005
# Payload bytes one hand-over holds at most, about (bytes payloads: Publisher messages
# up to 10 MiB each would otherwise make frames of gigabytes, pickled in one piece).
HANDOVER_BYTES = 8 * 1024 * 1024
# Of the ack timeout, the share one hand-over's handler time may fill.
_DEADLINE_SHARE = 0.25

# Handler time under which a batch is not worth splitting across workers: a hand-over
# costs the parent about 70 µs (build, pickle, pipe write, answer), so a split that
# saves less than this in the slower half only adds hand-overs.
SPLIT_WORTH = 200e-6
_COST_WEIGHT = 0.25  # of the newest batch in the running per-message handler time


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
        renew: restarts a hand-over's ack deadline from now (the worker starts on it).
    """

    handovers: int | None = PROCESS_HANDOVERS
    tranches = True

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
        self._since = 0.0  # when the worker began the first of them, about
        self._cost: float | None = None  # running handler seconds per message
        self._size: int | None = None  # running payload bytes per message (bytes payloads)

    def cap(self) -> int:
        """The most deliveries for one hand-over: few until the handler's time is known,
        then about `HANDOVER_WORK` of it (`SLOW_BATCH` to `PROCESS_BATCH`), no more than
        fill a quarter of the ack timeout, and about `HANDOVER_BYTES` of payload."""
        cost = self._cost
        if cost is None:
            return FIRST_BATCH
        if cost <= 0:
            size = PROCESS_BATCH
        else:
            size = min(PROCESS_BATCH, max(SLOW_BATCH, int(HANDOVER_WORK / cost)))
            if self._ack_timeout is not None:
                size = min(size, int(self._ack_timeout * _DEADLINE_SHARE / cost))
        if self._size:
            size = min(size, HANDOVER_BYTES // self._size)
        return max(1, size)

    def left(self, unsettled: int) -> int:
        """Of its ``unsettled`` deliveries, those it has yet to finish, about: less what
        it did of its running hand-over since it began it, at its measured time per
        delivery. Balanced by counts alone, a backlog's last hand-overs left one worker
        idle while the other still ran a hand-over it had just begun."""
        cost = self._cost
        if not cost or not self._running:
            return unsettled
        return max(unsettled - int((time.monotonic() - self._since) / cost), 0)

    def prefers_whole(self, count: int) -> bool:
        """True once this worker's handler is known to take ``count`` messages in less
        than `SPLIT_WORTH` (unknown: split, the safe choice for slow handlers)."""
        cost = self._cost
        return cost is not None and cost * count < SPLIT_WORTH

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Ask the worker to handle the tranche (``handover``; ``deliveries`` is empty);
        settle from its answer (never blocks)."""
        tranche = cast(Tranche, handover)
        envelopes = tranche.envelopes
        batch = WorkBatch.of_envelopes(
            self.subscriber_id, tranche.group or "", envelopes[0][TOPIC], envelopes,
            tranche.attempts, self._ack_timeout,
        )
        self._size = payload_size(batch.payloads, self._size)
        try:
            future = self._worker.ask(batch, timeout=None)
        except Exception as exc:  # e.g. a payload that does not pickle
            self._fail(tranche, "error", str(exc) or type(exc).__name__)
            return
        if not self._running:
            self._since = time.monotonic()
        self._running.append(tranche)  # only the answer callbacks remove (one I/O thread)
        future.add_done_callback(self._answered(tranche))

    def _started_next(self, handover: HandOver) -> None:
        """``handover`` was answered: the worker now runs the next one, whose ack
        deadline starts over (it waited in the worker's mailbox until now)."""
        running = self._running
        if handover in running:
            running.remove(handover)
        if running:
            self._since = time.monotonic()
            if self._renew is not None:
                self._renew(running[0])

    def _answered(self, tranche: Tranche) -> Callable[[Future[Any]], None]:
        def done(future: Future[Any]) -> None:
            self._started_next(tranche)
            error = future.exception()
            if error is not None:
                logger.info("worker of subscriber %s failed: %s", self.subscriber_id, error)
                self._fail(tranche, "worker_crashed", str(error))
                return
            elapsed, reply = future.result()
            size = len(tranche.envelopes)
            per_message = elapsed / size
            cost = self._cost
            self._cost = per_message if cost is None else cost + (per_message - cost) * _COST_WEIGHT
            if type(reply) is not int:
                self._finish(_claim_settled(tranche.unpack(), reply), size)
            elif tranche.claim_whole():  # the all-acked path: one record, no deliveries
                self._tracker.tell(tranche)
                self._group.tell(Credit(self.key, size, 1))
            else:  # a deadline or the close sweep took some: settle the rest one by one
                self._finish(_claim_acked(tranche, tranche.unpack()), size)

        return done

    def _fail(self, tranche: Tranche, reason: str, error: str) -> None:
        settled = []
        for delivery in tranche.unpack():
            if delivery._claim():
                delivery._set_nacked(reason, error)
                settled.append(delivery)
        self._finish(settled, len(tranche.envelopes))

    def _finish(self, settled: list[Delivery[Any]], count: int) -> None:
        if settled:
            self._tracker.tell(settled)
        self._group.tell(Credit(self.key, count, 1))


def payload_size(payloads: Sequence[Any], previous: int | None) -> int | None:
    """Bytes per message of a hand-over whose payloads are bytes (its first and last
    ones, a sample), folded into the running ``previous``; ``previous`` for other
    payloads (their pickled size is not known before they are pickled)."""
    first, last = payloads[0], payloads[-1]
    if first.__class__ is not bytes or last.__class__ is not bytes:
        return previous
    size = (len(first) + len(last)) // 2 + 1
    return size if previous is None else previous + int((size - previous) * _COST_WEIGHT)


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
    for index, acked, reason, text, *cause in settlements:
        delivery = deliveries[index]
        if not delivery._claim():
            continue  # its deadline or the close sweep won
        if acked:
            delivery._state = ACKED
        else:
            delivery._set_nacked(reason or "nack", text)
            if cause:
                delivery._cause = cause[0]
                logger.warning("handler raised on %r in a worker process:\n%s", delivery,
                               cause[0][1])
        settled.append(delivery)
    return settled
