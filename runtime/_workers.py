"""Process members: a Pool of worker processes running a group's handler on batches."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from actors import Actor, Ref
from runtime._delivery import ACKED, Delivery, HandOver
from runtime._envelope import ATTRIBUTES, KEY, MESSAGE_ID, TOPIC, message_of
from runtime._group import Credit
from runtime._member import Handler, run_handler

__all__ = ["PROCESS_WINDOW", "ProcessEndpoint", "WorkBatch", "WorkerActor"]

logger = logging.getLogger(__name__)

# Deliveries a worker process may hold at once (sent as one pickled batch).
PROCESS_WINDOW = 256

# (index, message, message_id, key, attributes, topic, attempt)
Work = tuple[int, Any, str, "str | None", "dict[str, str]", str, int]
# (index, acked, reason, error)
Settlement = tuple[int, bool, "str | None", "str | None"]


@dataclass(frozen=True, slots=True)
class WorkBatch:
    """Deliveries for a worker process: what crosses the pipe (pickled once per batch)."""

    subscriber_id: int
    group: str
    items: list[Work]


class _Collect:
    """The worker-side sink: settlements made during the handler call."""

    def __init__(self) -> None:
        self.settled: list[Delivery[Any]] = []

    def tell(self, message: Any) -> None:
        if isinstance(message, list):
            self.settled.extend(message)
        else:
            self.settled.append(message)


class WorkerActor(Actor):
    """Runs in a worker process: handles a `WorkBatch`, answers with its settlements.

    Settlements made after the handler returned (from other threads) cannot reach the
    parent; those deliveries settle by their ack deadline.

    Args:
        handler: the subscriber's handler (cloudpickled once, at spawn).
        auto_ack: ack on return, nack on exception.
    """

    def __init__(self, handler: Handler, auto_ack: bool) -> None:
        super().__init__()
        self._handler = handler
        self._auto_ack = auto_ack

    def on_receive(self, message: Any) -> Any:
        """Handle one batch; returns ``[(index, acked, reason, error), ...]``."""
        batch: WorkBatch = message
        sink = _Collect()
        handover = HandOver(sink, batch.subscriber_id, batch.group)
        deliveries: list[Delivery[Any]] = []
        for index, payload, message_id, key, attributes, topic, attempt in batch.items:
            delivery: Delivery[Any] = Delivery(
                (0, message_id, payload, key, attributes, topic, None), handover, index, attempt,
            )
            handover.pending[index] = delivery
            deliveries.append(delivery)
        run_handler(self._handler, self._auto_ack, handover, deliveries)
        return [
            (d._index, d._state == ACKED, d.reason, d.error) for d in sink.settled
        ]


class ProcessEndpoint:
    """The group's view of one pool member: each batch is one ask to the worker."""

    window = PROCESS_WINDOW

    def __init__(
        self, key: int, subscriber_id: int, worker: Ref, group: Ref, tracker: Ref,
    ) -> None:
        self.key = key
        self.subscriber_id = subscriber_id
        self._worker = worker
        self._group = group
        self._tracker = tracker

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Ask the worker to handle the batch; settle from its answer (never blocks)."""
        items: list[Work] = [
            (d._index, message_of(e), e[MESSAGE_ID], e[KEY], e[ATTRIBUTES], e[TOPIC], d._attempt)
            for d in deliveries for e in (d._envelope,)
        ]
        batch = WorkBatch(self.subscriber_id, handover.group or "", items)
        try:
            future = self._worker.ask(batch, timeout=None)
        except Exception as exc:  # e.g. a payload that does not pickle
            self._fail(handover, deliveries, "error", str(exc) or type(exc).__name__)
            return
        future.add_done_callback(self._answered(handover, deliveries))

    def _answered(
        self, handover: HandOver, deliveries: list[Delivery[Any]],
    ) -> Callable[[Future[Any]], None]:
        def done(future: Future[Any]) -> None:
            error = future.exception()
            if error is not None:
                logger.info("worker of subscriber %s failed: %s", self.subscriber_id, error)
                self._fail(handover, deliveries, "worker_crashed", str(error))
                return
            settled = []
            for index, acked, reason, text in future.result():
                delivery = deliveries[index]
                if not delivery._claim():
                    continue  # its deadline or the close sweep won
                if acked:
                    delivery._state = ACKED
                else:
                    delivery._set_nacked(reason or "nack", text)
                settled.append(delivery)
            self._finish(settled, len(deliveries))

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
        self._group.tell(Credit(self.key, count))
