"""The operations a broker offers every connection: publish, stats, leases, staging.

State shared by all connections lives here: the lease logs keyed by (topic, group,
consumer) and the staging area keyed by (topic, producer, batch id). Operations of
one connection (pull subscriptions and their deliveries) live in `Session`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from runtime.broker._protocol import plain_letter, wire_error, wire_types
from runtime.broker._publish_wait import PublishWaiting
from runtime.broker._settle import ack_in_bulk
from runtime.broker._staged_rows import StagedRows, Stamped
from runtime.broker._staging import DEFAULT_LIMITS, StagingArea, StagingLimits, settled_together
from runtime.broker.lease._ipc import lease_ipc
from runtime.broker.lease._log import LeaseLog
from runtime.broker.lease._record import LeasedDelivery
from runtime.core._message import Message, parts_of
from runtime.core._settings import check_timeout
from runtime.core.settlement._claims import fail_delivery
from runtime.errors import TopicNotFoundError

__all__ = ["BrokerService"]

logger = logging.getLogger(__name__)

DEFAULT_PUBLISH_TIMEOUT = 60.0
LEASE_PREFETCH = 8192
# Payload bytes of one lease_fetch_arrow reply, at most (plus one record).
FETCH_BYTES = 16 * 1024 * 1024

LeaseKey = tuple[str, str, str]


def join_group(topic: Any, group: str) -> Any:
    """A lease member of ``group`` with a deep prefetch (the lease log drains it fast,
    in whole hand-overs)."""
    return topic._lease_member(group, LEASE_PREFETCH)


class BrokerService:
    """Bus operations shared by every connection of one server; thread-safe.

    Args:
        bus: the served `Bus`.
        publish_timeout: bound of one batch publish (backpressure included).
        staging_limits: bounds of what peers may stage (decoded bytes).
        clock: the time source of leases and stage expiry.
    """

    def __init__(
        self,
        bus: Any,
        *,
        publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT,
        staging_limits: StagingLimits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bus = bus
        self._clock = clock
        self._lock = threading.Lock()
        self._publishing = PublishWaiting(bus, publish_timeout=publish_timeout, clock=clock)
        self._errors = wire_types()  # what an error in a batch's outcome may cross as
        self._leases: dict[LeaseKey, LeaseLog] = {}
        self._staging_limits = staging_limits
        self._staging: StagingArea[Stamped] = StagingArea(limits=staging_limits, clock=clock)

    def topic(self, name: str) -> Any:
        """The served topic ``name`` (raises `TopicNotFoundError`)."""
        return self._bus.topic(name)

    def topics(self) -> list[str]:
        """The served topic names."""
        return list(self._bus.topics())

    def stats(self, name: str | None = None) -> Any:
        """``bus.stats()``, or one topic's stats."""
        return self._bus.stats() if name is None else self._bus.topic(name).stats()

    def held_by(self) -> dict[str, str]:
        """``bus.held_by()``: what holds each held topic's publishers, named."""
        return dict(self._bus.held_by())

    def dead_letters(self, name: str) -> list[Any]:
        """A snapshot of topic ``name``'s dead letters, oldest first, as they cross."""
        return [plain_letter(letter) for letter in self._bus.dead_letters(name)]

    def held_dead_letters(self, name: str) -> list[Any]:
        """A snapshot of topic ``name``'s dead letters, oldest first: the queue's own
        objects (what `remove_dead_letters` takes)."""
        return list(self._bus.dead_letters(name))

    def remove_dead_letters(self, name: str, letters: list[Any]) -> int:
        """Remove exactly ``letters`` (from `held_dead_letters`) from topic ``name``'s
        dead letters; returns how many were still there."""
        return int(self._bus.dead_letters(name).remove(letters))

    def publish(
        self, name: str, message: object, key: str | None, attributes: Mapping[str, str] | None,
        timeout: float | None,
    ) -> str:
        """``topic.publish``; returns the message id (see `PublishWaiting.publish`).

        Raises:
            TypeError, ValueError: ``timeout`` is not a finite number or None.
        """
        check_timeout("timeout", timeout)
        return self._publishing.publish(name, message, key, attributes, timeout)

    def stop_waiting(self) -> None:
        """The server is closing: blocked publishes give up (`TopicClosedError`)."""
        self._publishing.stop_waiting()

    def replay_dead_letters(self, name: str, target: str | None) -> int:
        """Republish topic ``name``'s dead letters (to ``target``, default the same topic)."""
        return int(self._bus.dead_letters(name).replay(topic=target))

    def publish_batch(
        self, name: str, messages: list[Message], timeout: float | None = None,
    ) -> tuple[list[str], BaseException | None]:
        """Publish `Message` objects as one batch, waiting for room at most ``timeout``
        seconds from now (None: the server's ``publish_timeout``, also the most).

        Returns every message's outcome: the ids of the published prefix, in order, and
        why the rest was refused (None: all were published; `WouldBlock` naming what held
        the topic when time ran out). None of the rest is ever published later.

        Raises:
            TypeError: not a list of `Message` (nothing published).
            TypeError, ValueError: ``timeout`` is not a finite number or None.
        """
        check_timeout("timeout", timeout)
        if not isinstance(messages, list) or not all(type(m) is Message for m in messages):
            raise TypeError("publish_batch takes a list of Message")
        wait = None if timeout is None else max(timeout, 0.0)
        ids, error = self._publishing.publish_parts(self._bus.topic(name), *parts_of(messages), wait)
        return ids, None if error is None else wire_error(error, self._errors)

    def lease_position(self, name: str, group: str, consumer: str, lease_seconds: float) -> int:
        """The consumer's first unacked offset (where a fresh query starts)."""
        return self._lease(name, group, consumer, lease_seconds).position()

    def lease_latest(
        self, name: str, group: str, consumer: str, lease_seconds: float, start: int,
        max_rows: int | None,
    ) -> int:
        """Lease up to ``max_rows`` messages from ``start``; returns the end offset."""
        return self._lease(name, group, consumer, lease_seconds).latest(start, max_rows)

    def lease_fetch_arrow(
        self, name: str, group: str, consumer: str, lease_seconds: float, start: int, end: int
    ) -> bytes:
        """The records of ``[start, end)`` as Arrow IPC bytes (`lease_ipc`; the same on
        every call), cut short after the record whose payloads pass `FETCH_BYTES`: the
        batch's metadata names the offset it ends at, where the reader asks again."""
        log = self._lease(name, group, consumer, lease_seconds)
        columns, end = log.fetch_bounded(start, end, FETCH_BYTES)
        return lease_ipc(columns, end)

    def lease_ack(
        self, name: str, group: str, consumer: str, lease_seconds: float, offset: int
    ) -> dict[str, int]:
        """Cumulative ack below ``offset``.

        Returns ``position`` and ``late``: the leased messages that had settled before
        the ack (ack deadline or close) and were redelivered or dead-lettered instead.
        """
        position, late = self._lease(name, group, consumer, lease_seconds).ack(offset)
        return {"position": position, "late": late}

    def lease_ack_range(
        self, name: str, group: str, consumer: str, lease_seconds: float, start: int, end: int
    ) -> int:
        """Ack the leased records of ``[start, end)`` only; returns those that were late."""
        return self._lease(name, group, consumer, lease_seconds).ack_range(start, end)

    def lease_target(
        self, name: str, group: str, consumer: str, lease_seconds: float, start: int
    ) -> dict[str, int]:
        """Where the consumer stands from its offset ``start``, without leasing anything.

        Moves a log behind ``start`` forward (a restarted broker). Returns ``end`` (one
        past the last leased offset) and ``waiting``: messages the group holds for its
        members plus those handed to this consumer's member and not leased yet (what
        other groups and subscribers have not settled does not count).
        """
        log = self._lease(name, group, consumer, lease_seconds)
        end = log.advance(start)
        return {"end": end, "waiting": self._bus.topic(name)._queued(group) + log.unread()}

    def lease_missing(
        self, name: str, group: str, consumer: str, lease_seconds: float, start: int, end: int
    ) -> int:
        """How many offsets of ``[start, end)`` the log can no longer serve (acked, unknown)."""
        return self._lease(name, group, consumer, lease_seconds).missing(start, end)

    def lease_heartbeat(self, name: str, group: str, consumer: str, lease_seconds: float) -> None:
        """Extend the consumer's leases."""
        self._lease(name, group, consumer, lease_seconds).heartbeat()

    def stage(
        self, name: str, producer: str, batch: str, part: Any, columns: Mapping[str, Any] | bytes
    ) -> bool:
        """Stage one part of rows (a columns dict, or Arrow IPC bytes); False when that
        batch is already committed."""
        topic = self._bus.topic(name)  # unknown topic: fail the write task, not the commit
        rows = (StagedRows.from_ipc(columns, self._staging_limits.max_part_bytes)
                if isinstance(columns, bytes) else StagedRows.from_columns(columns))
        # Accepted now, while Spark's tasks still run: the commit only fans them out.
        stamped = Stamped(topic._stamp_parts(rows.datas, rows.attributes, rows.keys), rows.rejected)
        return self._staging.stage((name, producer), batch, part, stamped, rows.size)

    def commit(self, name: str, producer: str, batch: str, parts: list[Any]) -> bool:
        """Publish the listed parts of (producer, batch) once; False when already done.

        A commit that timed out leaves its rows in flight: a retry waits for them and
        reports their outcome, it never publishes them again (`StagingArea.commit`).
        """
        topic = self._bus.topic(name)

        def submit(staged: list[Stamped]) -> tuple[Future[Any], int]:
            futures, count = self._publishing.hand_over_rows(topic, staged)
            return settled_together(futures), count

        def wait(outcome: Future[Any], count: int) -> None:
            self._publishing.wait_published(topic, count, [outcome], keep_ids=False)

        return self._staging.commit((name, producer), batch, parts, submit, wait)

    def abort(self, name: str, producer: str, batch: str) -> int:
        """Drop the stages of (producer, batch); returns the parts dropped."""
        return self._staging.abort((name, producer), batch)

    def sweep(self) -> None:
        """Expire leases without a heartbeat and orphaned stages."""
        with self._lock:
            logs = list(self._leases.items())
        for (name, _, _), log in logs:
            if self._serves(name):
                log.expire()
            else:
                self._forget(name)
        self._staging.expire()

    def close(self) -> None:
        """Return every leased message to its group."""
        with self._lock:
            logs, self._leases = list(self._leases.values()), {}
        for log in logs:
            log.close()

    def _serves(self, name: str) -> bool:
        try:
            return not self._bus.topic(name).closed
        except TopicNotFoundError:
            return False

    def _forget(self, name: str) -> None:
        """Drop the lease logs of a removed or closed topic."""
        with self._lock:
            gone = [key for key in self._leases if key[0] == name]
            logs = [self._leases.pop(key) for key in gone]
        for log in logs:
            log.close()

    def _lease(self, name: str, group: str, consumer: str, lease_seconds: float) -> LeaseLog:
        check_timeout("lease_seconds", lease_seconds)
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds!r}")
        key = (name, group, consumer)
        with self._lock:
            log = self._leases.get(key)
            if log is None:
                topic = self._bus.topic(name)
                log = LeaseLog(
                    subscribe=lambda: join_group(topic, group),
                    reject=_reject_delivery,
                    lease_seconds=float(lease_seconds),
                    ack_many=ack_in_bulk,
                    clock=self._clock,
                )
                self._leases[key] = log
        log.renew(float(lease_seconds))
        return log


def _reject_delivery(delivery: LeasedDelivery, error: str) -> None:
    fail_delivery(delivery, error)
