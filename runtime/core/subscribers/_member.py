"""Thread members: an actor that runs a subscriber's handler on batches of deliveries."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from actors import Actor, Ref
from runtime.core._envelope import Envelope
from runtime.core.settlement._delivery import Delivery, HandOver, Sink
from runtime.core.subscribers._flusher import CallLater, Flusher
from runtime.core.subscribers._group_mail import Credit
from runtime.core.subscribers._progress import SlotWriter

__all__ = ["MemberActor", "Seat", "ThreadEndpoint", "run_handler"]

logger = logging.getLogger(__name__)

Handler = Callable[[Delivery[Any]], Any]

_monotonic = time.monotonic
_has = dict.__contains__

# Deliveries a thread member may hold unsettled by default (its prefetch).
THREAD_WINDOW = 32

Renew = Callable[[HandOver], None]


def run_handler(
    handler: Handler, auto_ack: bool, handover: HandOver, deliveries: list[Delivery[Any]],
    *, renew: Renew | None = None, catch: type[BaseException] = Exception, log: bool = True,
    progress: SlotWriter | None = None, flusher: Flusher | None = None,
) -> None:
    """Call ``handler`` on each still-pending delivery, then send the settlements as one.

    A raised ``catch`` (the thread members isolate every `BaseException`: a
    ``sys.exit()`` in a handler must not take the member down) nacks a still-pending
    delivery (reason ``error``; the exception's text, type and traceback kept) and, with
    ``log``, is logged at WARNING (a worker process leaves that to the parent); with
    ``auto_ack`` a normal return acks it. Deliveries already settled (deadline, close)
    are skipped. ``renew(handover)`` runs before a handler call once the hand-over's
    ``renew_at`` passed (a clock read per message, no call): it extends the
    hand-over's ack deadline while the handler works through it, so deliveries waiting
    behind slow ones are not expired unseen. A worker process passes its ``progress``
    slot, where the index of each delivery is written before its handler call; a
    thread subscriber its ``flusher``, which sends the buffered settlements while the
    batch runs.
    """
    buffer = handover.open_buffer()
    if flusher is not None:
        flusher.opened(handover)
    try:
        _run_each(handler, auto_ack, handover, deliveries, buffer, renew, catch, log, progress)
    finally:
        if flusher is not None:
            flusher.closed()
        settled = handover.close_buffer()
        if settled and handover.sink is not None:
            handover.sink.tell(settled)


def _run_each(
    handler: Handler, auto_ack: bool, handover: HandOver, deliveries: list[Delivery[Any]],
    buffer: deque[Delivery[Any]], renew: Renew | None, catch: type[BaseException], log: bool,
    progress: SlotWriter | None,
) -> None:
    """`run_handler`'s loop. A worker's pending deliveries are a lease (a dict with a
    ``deadline``, see `_work_batch._Lease`): its clock is read here, inline, and the
    dict read through ``dict``'s own methods, not the lease's (two Python calls per
    message saved); past the deadline the lease's ``pop`` expires what is left. The clock is read once per
    message, after the handler: that reading is also the next delivery's, taken a few
    hundred nanoseconds before it starts.

    Elsewhere a sweep (deadline, close) may settle any delivery before its turn, so
    each is looked up first. A lease's deliveries are new and reach nobody but through
    this loop: only the lease's expiry settles one before its turn, and that empties
    the lease, so an empty lease is all there is to check (no lookup per message).
    """
    pending = handover.pending
    expires: float | None = getattr(pending, "deadline", None)
    now = 0.0 if expires is None else _monotonic()  # read once per message
    words = None if progress is None else progress.words
    at = 0 if progress is None else progress.index_at
    for delivery in deliveries:
        index = delivery._index
        if expires is not None:
            if now >= expires or not pending:  # empty: a late claim expired it already
                pending.pop(index, None)  # the lease expires every delivery still pending
                return
        elif not _has(pending, index):
            continue
        if words is not None:  # a worker process: the parent reads it if we die
            words[at] = index
        if renew is not None and _monotonic() > handover.renew_at:  # `Deadlines.due`
            renew(handover)
        try:
            handler(delivery)
        except catch as exc:
            _raised(delivery, exc, log)
            ack = False
        else:
            ack = auto_ack
        if expires is not None:
            now = _monotonic()  # for this ack, and for the next delivery's check
            if now >= expires:
                pending.pop(index, None)  # expires it and every one still pending
                return
        # This thread owns the buffer: the ack joins it directly.
        if ack and delivery._take_ack(pending):
            buffer.append(delivery)


def _raised(delivery: Delivery[Any], exc: BaseException, log: bool) -> None:
    """Nack a delivery whose handler raised ``exc`` (reason ``error``, with its cause)."""
    if log:
        logger.warning("handler raised on %r", delivery, exc_info=True)
    cause = (type(exc).__qualname__, traceback.format_exc())
    delivery._fail_if_pending("error", str(exc) or type(exc).__name__, cause)


class MemberActor(Actor):
    """A balanced group member on its own thread.

    Args:
        handler: called with each `Delivery`.
        auto_ack: ack on return, nack on exception.
        group: the group actor, to which it returns credit after each batch.
        seat: its place (endpoint key, thread).
        renew: extends a hand-over's ack deadline while its handler works through it.
        call_later: the bus's timer (its settlements leave while a batch runs).
    """

    def __init__(
        self, handler: Handler, auto_ack: bool, group: Ref, seat: Seat,
        renew: Renew, call_later: CallLater,
    ) -> None:
        super().__init__()
        self._flusher = Flusher(call_later)
        self._handler = handler
        self._auto_ack = auto_ack
        self._group = group
        self._key = seat.key
        self._seat = seat
        self._renew = renew

    def on_start(self) -> None:
        """Note the thread, so an unsubscribe from inside a handler does not wait on it."""
        self._seat.thread = threading.get_ident()

    def on_receive(self, message: Any) -> Any:
        """Run one batch: ``(handover, deliveries)``."""
        handover, deliveries = message
        try:
            run_handler(self._handler, self._auto_ack, handover, deliveries,
                        renew=self._renew, catch=BaseException, flusher=self._flusher)
        finally:
            self._group.tell(Credit(self._key, len(deliveries)))
        return None


class Seat:
    """A subscriber's place: its keys, and (once running) its actor and thread."""

    def __init__(self, key: int, subscriber_id: int) -> None:
        self.key = key
        self.subscriber_id = subscriber_id
        self.ref: Ref | None = None
        self.thread = 0

    def retire(self, timeout: float) -> None:
        """Stop the actor gracefully (queued batches first); never from its own thread."""
        ref = self.ref
        if ref is None or self.thread == threading.get_ident():
            return
        try:
            ref.stop(timeout=timeout)
        except Exception:
            logger.warning("subscriber %s did not stop in time", self.subscriber_id, exc_info=True)


class ThreadEndpoint:
    """The group's view of a `MemberActor`: up to ``window`` deliveries unsettled."""

    handovers: int | None = None
    cost: float | None = None  # never measured: a hand-over to a thread is cheap, and
    # splitting lets I/O overlap

    def __init__(self, seat: Seat, ref: Ref, window: int = THREAD_WINDOW) -> None:
        self.key = seat.key
        self.subscriber_id = seat.subscriber_id
        self.ref = ref
        self.window = window

    def cap(self) -> int:
        """A hand-over may fill the whole window."""
        return self.window

    def left(self, unsettled: int) -> int:
        """All of them: a thread's handler time is not measured."""
        return unsettled

    def hand_over(
        self, sink: Sink, group: str, envelopes: Sequence[Envelope], attempts: list[int] | None,
    ) -> tuple[HandOver, list[Delivery[Any]]]:
        """A hand-over of ``envelopes`` and its deliveries, all pending (its deadline runs
        from the hand-over)."""
        return HandOver.of(sink, self.subscriber_id, group, envelopes, attempts)

    def push(self, handover: HandOver, deliveries: list[Delivery[Any]]) -> None:
        """Tell the member the batch (never blocks)."""
        self.ref.tell((handover, deliveries))

