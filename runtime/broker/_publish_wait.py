"""A broker's publishes: waiting on the topic's backpressure without outliving the server.

`BrokerService` publishes for its connections (one message, a batch, a Spark commit's
staged rows) through the `PublishWaiting` it holds. Those calls block while the topic
applies backpressure; they wait in slices of `WAIT_SLICE`, so a server that is closing
releases them at once (`TopicClosedError`), and a batch publish that times out says what
holds the topic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from runtime.broker._staged_rows import Stamped
from runtime.core._block import join_envelopes
from runtime.core._message import Message
from runtime.core._topic_actor import BatchOutcome, batch_ids
from runtime.errors import TopicClosedError, WouldBlock

__all__ = ["WAIT_SLICE", "PublishWaiting", "dead_letter"]

_PUBLISH_CHUNK = 1000
ERROR_REASON = "error"
# A blocked remote publish re-checks this often whether the server is closing.
WAIT_SLICE = 0.1


def dead_letter(topic: Any, message: Message, error: str) -> None:
    """Put a message that was never published into ``topic``'s dead letters (``error``)."""
    topic._dead_letter(message, reason=ERROR_REASON, error=error)


class PublishWaiting:
    """How a broker's publishes wait on backpressure; thread-safe.

    Args:
        bus: the served `Bus`.
        publish_timeout: bound of one batch publish (backpressure included).
        clock: the time source of the waits.
    """

    def __init__(self, bus: Any, *, publish_timeout: float, clock: Callable[[], float]) -> None:
        self._bus = bus
        self._publish_timeout = publish_timeout
        self._clock = clock
        self._stopping = threading.Event()

    def publish(
        self, name: str, message: object, key: str | None, attributes: Mapping[str, str] | None,
        timeout: float | None,
    ) -> str:
        """``topic.publish``; returns the message id.

        Waits on backpressure in slices, so a server that closes releases it at once
        (`TopicClosedError`; the message was not published).
        """
        topic = self._bus.topic(name)
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            remaining = None if deadline is None else max(deadline - self._clock(), 0.0)
            wait = WAIT_SLICE if remaining is None else min(remaining, WAIT_SLICE)
            try:
                report = topic.publish(message, key=key, attributes=attributes, timeout=wait)
            except WouldBlock:
                if self._stopping.is_set():
                    raise TopicClosedError(name) from None
                if remaining is not None and remaining <= WAIT_SLICE:
                    raise
                continue
            return str(report.message_id)

    def stop_waiting(self) -> None:
        """The server is closing: blocked publishes give up (`TopicClosedError`)."""
        self._stopping.set()

    def hand_over_rows(self, topic: Any, staged: list[Stamped]) -> tuple[list[Future[Sequence[str]]], int]:
        """Dead-letter the rejected rows of a commit and tell the topic to publish the
        rest; never blocks. Returns the futures of the publish and the rows told."""
        for message, error in (pair for part in staged for pair in part.rejected):
            dead_letter(topic, message, error)
        parts = [part.envelopes for part in staged if part.envelopes]
        envelopes = join_envelopes(parts) if parts else []
        return [batch_ids(topic._publish_batches([envelopes[i:i + _PUBLISH_CHUNK]]))
                for i in range(0, len(envelopes), _PUBLISH_CHUNK)], len(envelopes)

    def publish_parts(
        self, topic: Any, datas: list[bytes], attributes: list[dict[str, str]],
        keys: list[str | None], timeout: float | None,
    ) -> tuple[list[str], BaseException | None]:
        """Publish a batch given as its parts, waiting for room at most ``timeout``
        seconds (None, and never more than, the server's ``publish_timeout``) from now.

        Returns the outcome of every message: the ids of the published prefix, and why
        the rest was refused (None when all were published). The deadline goes with the
        batch into the topic (`Topic._publish_batches`), so the topic itself stops
        waiting when it passes: nothing of the batch enters the topic once this returns
        (see `_settled`).
        """
        budget = self._publish_timeout if timeout is None else min(timeout, self._publish_timeout)
        deadline = time.monotonic() + budget
        outcomes = topic._publish_batches([(datas, attributes, keys)], deadline=deadline)
        ((ids, error),) = self._settled(outcomes, deadline, topic)
        published = [] if ids is None else list(ids)
        if isinstance(error, WouldBlock):
            error = WouldBlock(
                f"topic {topic.name!r} published {len(published)} of {len(datas)} messages "
                f"within {budget}s; the rest were refused: {error}")
        return published, error

    def _settled(
        self, outcomes: Future[list[BatchOutcome]], deadline: float, topic: Any,
    ) -> list[BatchOutcome]:
        """The outcomes of a batch published with ``deadline``, all final.

        Waits in slices until the deadline (or until the server closes). A batch the
        topic has not started on by then (its actor is busy, or behind other batches)
        is cancelled, so it is never published (all of it refused); one it started on
        is waited for: each of its waits for room ends at the deadline, so its outcome
        follows at once.
        """
        while not self._stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return outcomes.result(timeout=min(remaining, WAIT_SLICE))
            except TimeoutError:
                continue
        if outcomes.cancel():
            if self._stopping.is_set():
                return [(None, TopicClosedError(topic.name))]
            held = topic.held_by() or "it did not take the batch in time"
            return [(None, WouldBlock(f"topic {topic.name!r} did not start on the batch: {held}"))]
        return outcomes.result()

    def wait_published(
        self, topic: Any, count: int, futures: list[Future[Sequence[str]]], *,
        keep_ids: bool = True,
    ) -> list[str]:
        """The ids of ``count`` messages published as ``futures``, within the timeout
        (none unless ``keep_ids``: a commit reads none)."""
        deadline = self._clock() + self._publish_timeout
        ids: list[str] = []
        for future in futures:
            try:
                published = self._result(future, deadline, str(getattr(topic, "name", "")))
                if keep_ids:
                    ids += published
            except TimeoutError:
                # Say what holds the publish (a full group, max_pending, a ring behind), not
                # just that it timed out: a Spark commit shows this text to the user.
                held = topic.held_by() or "the topic did not accept the batch in time"
                raise TimeoutError(
                    f"publishing {count} messages to topic {topic.name!r} timed out "
                    f"after {self._publish_timeout}s: {held}") from None
        return ids

    def _result(
        self, future: Future[Sequence[str]], deadline: float, name: str,
    ) -> Sequence[str]:
        """``future.result()`` by `WAIT_SLICE`, given up when the server is closing."""
        while True:
            remaining = max(deadline - self._clock(), 0.0)
            try:
                return future.result(timeout=min(remaining, WAIT_SLICE))
            except TimeoutError:
                if remaining <= WAIT_SLICE:
                    raise
                if self._stopping.is_set():
                    raise TopicClosedError(name) from None
