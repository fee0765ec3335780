"""Dead letters: settlements that failed for good, kept per topic for inspection and replay."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runtime.core._envelope import ATTRIBUTES, KEY, message_id, message_of
from runtime.core.settlement._delivery import Delivery

__all__ = ["DeadLetter", "DeadLetterQueue", "dead_letter_of", "republish_drained"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message one destination failed to settle for good.

    Attributes:
        message: the published message.
        message_id: its id.
        topic: the topic's name.
        subscriber_id: the subscription that had it last (-1: none, e.g. dropped).
        group: the balanced group's name, or None.
        reason: ``nack``, ``timeout``, ``no_subscribers``, ``dropped``, ``lagged``,
            ``closed``, ``error``, ``worker_crashed`` or ``unsubscribed``.
        error: free text (the nack's text, the handler's exception), or None.
        attempts: delivery attempts made.
        at: ``time.time()`` when it was dead-lettered.
        exception: for reason ``error``, the qualified name of the exception the handler
            raised (None otherwise).
        traceback: for reason ``error``, the handler's traceback as text (None otherwise;
            a worker process sends it as text).
        key: the message's ordering key (kept for `DeadLetterQueue.replay`).
        attributes: the message's attributes (kept for replay).
    """

    message: Any
    message_id: str
    topic: str
    subscriber_id: int
    group: str | None
    reason: str
    error: str | None
    attempts: int
    at: float
    exception: str | None = None
    traceback: str | None = None
    key: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)


def dead_letter_of(delivery: Delivery[Any], topic: str) -> DeadLetter:
    """The dead letter of a delivery that failed for good (its failure is set)."""
    envelope, handover = delivery._envelope, delivery._handover
    reason, error, _ = delivery._failure
    exception, traceback = getattr(delivery, "_cause", None) or (None, None)
    attributes = envelope[ATTRIBUTES]
    if attributes.__class__ is not dict:  # none, or the shared read-only empty one: a letter
        attributes = dict(attributes or ())  # may leave the process, and peers read dicts
    return DeadLetter(
        message=message_of(envelope), message_id=message_id(envelope), topic=topic,
        subscriber_id=handover.subscriber_id, group=handover.group, reason=reason,
        error=error, attempts=delivery._attempt, at=time.time(), exception=exception,
        traceback=traceback, key=envelope[KEY], attributes=attributes,
    )


class DeadLetterQueue:
    """A topic's dead letters, oldest first; bounded by ``limit`` (newest kept).

    Thread-safe. The owning topic provides ``replayer``: given ``replay``'s ``topic``
    argument it returns the function that publishes one dead letter there.

    Args:
        limit: how many to keep (None: unbounded); evictions are counted in `evicted`.
        replayer: ``replayer(topic) -> republish(dead_letter)``.
    """

    def __init__(
        self, *, limit: int | None = None,
        replayer: Callable[[Any], Callable[[DeadLetter], None]] | None = None,
    ) -> None:
        self._items: deque[DeadLetter] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self._callback: Callable[[DeadLetter], Any] | None = None
        self._replayer = replayer
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[DeadLetter]:
        """Iterate over a snapshot, oldest first; removes nothing."""
        with self._lock:
            items = list(self._items)
        return iter(items)

    def __repr__(self) -> str:
        return f"DeadLetterQueue(len={len(self)}, evicted={self._evicted})"

    @property
    def evicted(self) -> int:
        """How many dead letters the limit pushed out."""
        return self._evicted

    def drain(self) -> list[DeadLetter]:
        """Empty the queue, then return what it held, oldest first."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def remove(self, dead_letters: Iterable[DeadLetter]) -> int:
        """Remove exactly ``dead_letters`` (these objects, wherever they stand; the others
        keep their order). Returns how many were still held (the limit may have pushed
        some out meanwhile)."""
        gone = {id(letter) for letter in dead_letters}
        with self._lock:
            kept = [item for item in self._items if id(item) not in gone]
            removed = len(self._items) - len(kept)
            self._items.clear()
            self._items.extend(kept)
        return removed

    def clear(self) -> None:
        """Drop every dead letter."""
        with self._lock:
            self._items.clear()

    def on_dead_letter(self, callback: Callable[[DeadLetter], Any] | None) -> None:
        """Call ``callback(dead_letter)`` for each new one (replaces the previous; None: off).

        The callback runs in the thread that dead-letters (usually the tracker actor's);
        it must not block. Its exceptions are logged and ignored.
        """
        self._callback = callback

    def replay(self, *, topic: Any = None) -> int:
        """Drain and replay every dead letter, oldest first; return the count.

        On the topic they came from, each letter goes back only to the destination that
        failed it (its group or broadcast subscriber), as a new attempt of the same
        message id: destinations that acked never see it twice. A letter whose
        destination is gone is dead-lettered again as ``unsubscribed``; one that no
        destination took (``no_subscribers``) is published anew. With another
        ``topic``, every letter is published there anew (to all its destinations),
        blocking while that topic applies its backpressure.

        Args:
            topic: a `Topic` or a topic name (default: the topic these came from).

        Raises:
            TopicNotFoundError: no topic of that name.
            TopicClosedError: the target topic is closed.
        """
        if self._replayer is None:
            raise RuntimeError("this dead-letter queue has no topic to replay to")
        republish = self._replayer(topic)
        return republish_drained(self.drain(), republish, self._restore)

    def keeps(self) -> int | None:
        """How many of a run of new letters can survive (the limit), when only those need
        building: None when every letter must be built (no limit, or a callback)."""
        return None if self._callback is not None else self._items.maxlen

    def append_tail(self, dead_letters: list[DeadLetter], skipped: int) -> None:
        """Store the last letters of a run whose first ``skipped`` were never built: the
        limit would push them out (counted in `evicted`). Only when `keeps` is not None."""
        with self._lock:
            limit = self._items.maxlen
            self._evicted += skipped
            if limit is not None:
                self._evicted += max(len(self._items) + len(dead_letters) - limit, 0)
            self._items.extend(dead_letters)

    def append(self, dead_letter: DeadLetter) -> Callable[[DeadLetter], Any] | None:
        """Store one; return the callback to run for it (outside the caller's locks)."""
        with self._lock:
            if self._items.maxlen is not None and len(self._items) == self._items.maxlen:
                self._evicted += 1
            self._items.append(dead_letter)
        return self._callback

    def notify(self, callback: Callable[[DeadLetter], Any], dead_letter: DeadLetter) -> None:
        """Run ``callback`` for ``dead_letter``, logging what it raises."""
        try:
            callback(dead_letter)
        except Exception:
            logger.exception("on_dead_letter callback failed for %s", dead_letter.message_id)

    def _restore(self, items: list[DeadLetter]) -> None:
        with self._lock:
            self._items.extendleft(reversed(items))


def republish_drained(
    items: list[DeadLetter], republish: Callable[[DeadLetter], Any],
    restore: Callable[[list[DeadLetter]], None],
) -> int:
    """Republish drained letters oldest first; the count. A letter that fails to go
    ``restore``s itself and every later one (nothing drained is lost), then raises."""
    for index, item in enumerate(items):
        try:
            republish(item)
        except BaseException:
            restore(items[index:])
            raise
    return len(items)
