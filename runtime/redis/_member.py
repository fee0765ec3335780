"""A push member's loop: read a batch, run the handler on each delivery, settle."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from runtime.errors import BackendUnavailableError, SettlementError
from runtime.redis._delivery import RedisDelivery

__all__ = ["BLOCK", "MemberLoop", "Reader", "run_handler"]

logger = logging.getLogger("runtime")

BLOCK = 0.1
"""Seconds a member's read waits for new entries: how long a stop may take to be seen."""
_BACKOFF = 0.5  # seconds between reads while Redis does not answer


class Reader(Protocol):
    """What a member loop reads from: a group's `Consumer`, or a broadcast reader."""

    def read(self, count: int, block: float | None) -> list[RedisDelivery[Any]]: ...

    def expired(self, delivery: RedisDelivery[Any]) -> bool: ...

    def flush(self, *, due_only: bool = False) -> None: ...


def run_handler(handler: Callable[[Any], Any], delivery: RedisDelivery[Any], auto_ack: bool,
                topic: str) -> None:
    """Run ``handler(delivery)``; a normal return acks with ``auto_ack``, an exception
    nacks a still-pending delivery as ``error`` (logged at WARNING with its traceback)."""
    try:
        handler(delivery)
    except SettlementError as exc:
        logger.warning("topic %s: handler settled %s too late: %s", topic,
                       delivery.message_id, exc)
        return
    except Exception as exc:
        logger.warning("topic %s: handler failed on %s", topic, delivery.message_id,
                       exc_info=True)
        if delivery.pending:
            delivery.fail("n", "error", str(exc), type(exc).__qualname__,
                          "".join(traceback.format_exception(exc)))
        return
    if auto_ack and delivery.pending:
        delivery.ack()


class MemberLoop:
    """Reads ``reader`` and runs ``handler`` on each delivery until ``stopping`` is set.

    The acks of a batch leave with the next read (one round trip for both), or sooner
    once the oldest waited `runtime.redis._consumer.FLUSH_AFTER`.

    Args:
        reader: where deliveries come from.
        handler: the subscriber's handler.
        auto_ack: ack on a normal return.
        topic: the topic's name (for logs).
        prefetch: deliveries read at once.
        stopping: set to stop; a batch read but not started is left for the owner to
            hand back.
        running: told each delivery's stream entry id before its handler runs ("" after).
    """

    def __init__(self, reader: Reader, handler: Callable[[Any], Any], *, auto_ack: bool,
                 topic: str, prefetch: int, stopping: threading.Event | Any,
                 running: Callable[[str], None] | None = None) -> None:
        self._reader = reader
        self._handler = handler
        self._auto_ack = auto_ack
        self._topic = topic
        self._prefetch = prefetch
        self._stopping = stopping
        self._running = running

    def run(self) -> None:
        """The loop; returns once stopping is set (after the handler running then)."""
        reader, stopping, running = self._reader, self._stopping, self._running
        while not stopping.is_set():
            try:
                deliveries = reader.read(self._prefetch, BLOCK)
                for delivery in deliveries:
                    if stopping.is_set():
                        break
                    if reader.expired(delivery):
                        continue
                    if running is not None:
                        running(delivery.entry_id)
                    run_handler(self._handler, delivery, self._auto_ack, self._topic)
                    if running is not None:
                        running("")
                    reader.flush(due_only=True)
            except BackendUnavailableError as exc:
                logger.warning("topic %s: member waits for Redis: %s", self._topic, exc)
                stopping.wait(_BACKOFF)
            except Exception:  # a refused command (its group deleted): say so, keep trying
                logger.exception("topic %s: member read failed", self._topic)
                stopping.wait(_BACKOFF)
