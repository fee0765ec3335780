"""Process members: a Pool of worker processes running a group's handler on batches.

The parent's side: each worker is one `ProcessEndpoint` of the group, holding at most
two hand-overs; what crosses the pipe and runs in the worker is in `_work_batch`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import Any, cast

from actors import Ref
from actors.errors import ActorError, WorkerCrashedError
from runtime.core._envelope import TOPIC, Envelope
from runtime.core.settlement._delivery import Delivery, HandOver, Sink, Tranche
from runtime.core.subscribers._group_mail import Credit
from runtime.core.subscribers._progress import Progress
from runtime.core.subscribers._work_batch import Settlement, WorkBatch, WorkerActor

# Puts a hand-over's messages back in its group: ``(envelope, attempt)`` each.
Requeue = Callable[[HandOver, list[tuple[Envelope, int]]], None]

__all__ = [
    "FIRST_BATCH", "HANDOVER_BYTES", "HANDOVER_WORK", "PROCESS_BATCH", "SLOW_BATCH",
    "ProcessEndpoint", "WorkBatch", "WorkerActor",
]

logger = logging.getLogger(__name__)

# Hand-overs a worker process holds at once: one it runs, one waiting behind it. What
# arrives meanwhile waits in the group and leaves as the next, larger hand-over.
PROCESS_HANDOVERS = 2
# The most deliveries in one hand-over (one pickled batch); a hand-over is sized to about
# `HANDOVER_WORK` of handler time, between `SLOW_BATCH` and this. The first ones, sent
# before the worker's handler time is known, hold `FIRST_BATCH` (a slow handler must not
# get a batch that outlives its ack deadline). Each hand-over costs the parent a round
# of thread wake-ups (answer, credit, the topic's gate, the Publisher's confirmation):
# larger hand-overs trade latency and memory for fewer of them. Re-measure with
# `python -m benchmarks --only pipeline_pool` when changing it.
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
_COST_WEIGHT = 0.25  # of the newest batch in the running per-message handler time


class ProcessEndpoint:
    """The group's view of one pool member: each batch is one ask to the worker.

    A hand-over's ack deadline counts from when the worker starts it, which the worker
    reports in the member's ``progress`` slot; if the worker dies, only the delivery
    it was running settles ``worker_crashed`` and the rest go back to the group
    (``requeue``) with their attempt numbers unchanged. A hand-over that does not pickle
    whole, or does not unpickle whole in the worker, is sent again one payload at a time,
    so the bad ones fail alone (``error``).

    Args:
        key: its endpoint key in the group.
        subscriber_id: the subscription's id.
        worker: the worker process's actor.
        group: the group actor (credit goes back there).
        tracker: the tracker actor (settlements go there).
        prefetch: deliveries it may hold unsettled (None: two full hand-overs).
        ack_timeout: the topic's ack timeout (bounds a hand-over's expected run time).
        progress: the group's progress slots, and this member's slot in them.
        requeue: puts a hand-over's unsettled messages back in the group.
    """

    handovers: int | None = PROCESS_HANDOVERS

    def __init__(
        self, key: int, subscriber_id: int, worker: Ref, group: Ref, tracker: Ref, *,
        progress: tuple[Progress, int], requeue: Requeue, prefetch: int | None = None,
        ack_timeout: float | None = None,
    ) -> None:
        self.key = key
        self.subscriber_id = subscriber_id
        self.window = PROCESS_HANDOVERS * PROCESS_BATCH if prefetch is None else prefetch
        self._worker = worker
        self._group = group
        self._tracker = tracker
        self._ack_timeout = ack_timeout
        self._progress, self._slot = progress
        # Its hand-overs' numbers (from 1, in the order they are sent), which the worker
        # reports in its slot; the group's thread and the I/O thread take them.
        self._number = 0
        self._lock = threading.Lock()
        self._requeue = requeue
        self._running: list[HandOver] = []  # in flight, in the order the worker takes them
        self._since = 0.0  # when the worker began the first of them, about
        # Its handler's running seconds per message (None until its first answer).
        self.cost: float | None = None
        self._size: int | None = None  # running payload bytes per message (bytes payloads)

    def cap(self) -> int:
        """The most deliveries for one hand-over: few until the handler's time is known,
        then about `HANDOVER_WORK` of it (`SLOW_BATCH` to `PROCESS_BATCH`), no more than
        fill a quarter of the ack timeout, and about `HANDOVER_BYTES` of payload."""
        cost = self.cost
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
        delivery (balanced by counts alone, a backlog's last hand-overs left one worker
        idle while the other still ran a hand-over it had just begun)."""
        cost = self.cost
        if not cost or not self._running:
            return unsettled
        return max(unsettled - int((time.monotonic() - self._since) / cost), 0)

    def hand_over(
        self, sink: Sink, group: str, envelopes: Sequence[Envelope], attempts: list[int] | None,
    ) -> tuple[HandOver, list[Delivery[Any]]]:
        """A `Tranche` of ``envelopes``, numbered for the worker before the ledger gives
        it a deadline: the deadline stays off until the worker reports that it started
        it. No deliveries: the tranche builds them only if something fails."""
        with self._lock:
            self._number += 1
            number = self._number
        return Tranche(sink, self.subscriber_id, group, envelopes, attempts, number=number,
                       started=partial(self._progress.running_for, self._slot, number)), []

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Ask the worker to handle the tranche (``handover``; ``deliveries`` is empty);
        settle from its answer (never blocks).

        Bytes payloads update the running bytes per message `cap` bounds hand-overs by,
        from the first and last of the batch; the size of other payloads is not known
        before they are pickled.
        """
        tranche = cast(Tranche, handover)
        envelopes = tranche.envelopes
        batch = WorkBatch.of_envelopes(
            self.subscriber_id, tranche.group or "", envelopes[0][TOPIC], envelopes,
            tranche.attempts, self._ack_timeout, tranche.number,
            (self._progress.path, self._slot),
        )
        first, last = batch.payloads[0], batch.payloads[-1]
        if first.__class__ is bytes and last.__class__ is bytes:  # else not known unpickled
            size, previous = (len(first) + len(last)) // 2 + 1, self._size  # a sample
            self._size = size if previous is None else previous + int(
                (size - previous) * _COST_WEIGHT)
        self._send(tranche, batch)

    def _send(self, tranche: Tranche, batch: WorkBatch) -> None:
        try:
            future = self._worker.ask(batch, timeout=None)
        except Exception as exc:  # a payload that does not pickle
            if batch.pickled:
                self._fail(tranche, "error", str(exc) or type(exc).__name__)
            else:
                self._send_each(tranche, batch)
            return
        if not self._running:
            self._since = time.monotonic()
        self._running.append(tranche)  # only the answer callbacks remove (one I/O thread)
        future.add_done_callback(partial(self._answered, tranche, batch))

    def _send_each(self, tranche: Tranche, batch: WorkBatch) -> None:
        """Send ``tranche`` again with each payload pickled alone; the ones that do not
        pickle fail here, alone."""
        each, failed = batch.pickled_each()
        if failed:
            deliveries = tranche.unpack()
            settled = [deliveries[i] for i, text in failed.items()
                       if deliveries[i]._settle_failed("error", text)]
            if settled:
                self._tracker.tell(settled)
        if len(failed) == len(each.payloads):
            self._group.tell(Credit(self.key, len(tranche.envelopes), 1))
            return
        self._send(tranche, each)

    def _answered(self, tranche: Tranche, batch: WorkBatch, future: Future[Any]) -> None:
        """Settle from the worker's answer to ``batch`` (in the I/O thread)."""
        running = self._running
        if tranche in running:
            running.remove(tranche)
        if running:
            self._since = time.monotonic()
        error = future.exception()
        if error is not None:
            self._failed(tranche, batch, error)
            return
        elapsed, reply = future.result()
        size = len(tranche.envelopes)
        per_message = elapsed / size
        cost = self.cost
        self.cost = per_message if cost is None else cost + (per_message - cost) * _COST_WEIGHT
        if type(reply) is not int:
            self._finish(_claim_settled(tranche.unpack(), reply), size)
        elif tranche.claim_whole():  # the all-acked path: one record, no deliveries
            self._tracker.tell(tranche)
            self._group.tell(Credit(self.key, size, 1))
        else:  # a deadline, the close sweep or a failed payload took some
            self._finish(_claim_acked(tranche.unpack()), size)

    def _failed(self, tranche: Tranche, batch: WorkBatch, error: BaseException) -> None:
        """The ask for ``batch`` failed: the worker died, or the batch did not load there."""
        if isinstance(error, WorkerCrashedError) or not isinstance(error, Exception):
            # It died, or a handler is ending it (``sys.exit`` reaches the parent first).
            logger.info("worker of subscriber %s crashed: %r", self.subscriber_id, error)
            self._crashed(tranche, batch.number, str(error) or type(error).__name__)
        elif isinstance(error, ActorError) or batch.pickled:
            logger.info("worker of subscriber %s failed: %s", self.subscriber_id, error)
            self._fail(tranche, "worker_crashed", str(error))
        else:  # it did not unpickle whole in the worker, which ran none of it
            with self._lock:  # a new number: it goes behind what the worker holds
                self._number += 1
                number = self._number
            tranche.run_by_worker(number, partial(self._progress.running_for, self._slot, number))
            self._send_each(tranche, replace(batch, number=tranche.number))

    def _crashed(self, tranche: Tranche, number: int, error: str) -> None:
        """Only the delivery the worker was running settles ``worker_crashed`` (an
        attempt); the rest go back to the group as they were (the deadline and the
        close sweep may have taken some)."""
        running = self._progress.running_index(self._slot, number)
        crashed: list[Delivery[Any]] = []
        back: list[tuple[Envelope, int]] = []
        for delivery in tranche.unpack():
            if delivery._index == running:
                if delivery._settle_failed("worker_crashed", error):
                    crashed.append(delivery)
            elif delivery._withdraw():
                back.append((delivery._envelope, delivery._attempt))
        if back:
            self._requeue(tranche, back)
        self._finish(crashed, len(tranche.envelopes))

    def _fail(self, tranche: Tranche, reason: str, error: str) -> None:
        settled = [d for d in tranche.unpack() if d._settle_failed(reason, error)]
        self._finish(settled, len(tranche.envelopes))

    def _finish(self, settled: list[Delivery[Any]], count: int) -> None:
        if settled:
            self._tracker.tell(settled)
        self._group.tell(Credit(self.key, count, 1))


def _claim_acked(deliveries: list[Delivery[Any]]) -> list[Delivery[Any]]:
    """Claim every delivery the parent still holds as acked (their deadline may have won)."""
    return [d for d in deliveries if d._settle_acked()]


def _claim_settled(
    deliveries: list[Delivery[Any]], settlements: list[Settlement],
) -> list[Delivery[Any]]:
    """Claim and settle the deliveries the worker reported; the rest wait for deadlines."""
    settled = []
    for index, acked, reason, text, *cause in settlements:
        delivery = deliveries[index]
        if acked:
            won = delivery._settle_acked()
        else:
            won = delivery._settle_failed(reason or "nack", text, cause[0] if cause else None)
            if won and cause:
                logger.warning("handler raised on %r in a worker process:\n%s", delivery,
                               cause[0][1])
        if won:  # else its deadline or the close sweep won
            settled.append(delivery)
    return settled
