"""The topic actor, which runs Publisher batches through the topic's publish path, and
`BatchSeam`, the topic's calls that feed it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol

from actors import Actor, Ref
from runtime.core._block import Runs
from runtime.core._message import Message, parts_of
from runtime.core._publishing import PartlyPublished, PublishPath
from runtime.core.settlement._ledger import Ledger
from runtime.errors import TopicClosedError

__all__ = [
    "BatchOutcome", "BatchSeam", "PublishBatch", "PublishEnvelopes", "PublishRun", "TopicActor",
]

logger = logging.getLogger(__name__)

# Batches that wait for the ones behind them in the mailbox, at most.
_MAX_MERGED = 16

# A batch's ids, or why it failed (both: the topic accepted only a prefix of it).
BatchOutcome = tuple["Sequence[str] | None", "BaseException | None"]


class Resolvable(Protocol):
    """What the topic actor resolves a batch through: a `Future`, or a run's slot."""

    def set_running_or_notify_cancel(self) -> bool: ...
    def set_result(self, result: Sequence[str]) -> None: ...
    def set_exception(self, exception: BaseException | None) -> None: ...


@dataclass(frozen=True, slots=True)
class PublishBatch:
    """A Publisher batch as parallel lists (data, attributes, key per message);
    ``future`` resolves with the ids in order, or the failure."""

    datas: list[bytes]
    attributes: list[dict[str, str]]
    keys: list[str | None]
    future: Resolvable


@dataclass(frozen=True, slots=True)
class PublishRun:
    """Publisher batches sent together, each ``(datas, attributes, keys)``; ``reply``
    is called once, in the topic's thread, with each batch's `BatchOutcome` in order.

    One mailbox message and one reply for several batches: per batch, a `Future`,
    its callback and a reply message each cost both actors a few microseconds.
    """

    parts: list[tuple[list[bytes], list[dict[str, str]], list[str | None]]]
    reply: Callable[[list[BatchOutcome]], None]


@dataclass(frozen=True, slots=True)
class PublishEnvelopes:
    """A batch accepted ahead of its publish (`PublishPath.stamp_parts`: staged sink
    rows); ``future`` resolves as a `PublishBatch`'s."""

    envelopes: Sequence[Any]
    future: Future[Sequence[str]]


class TopicActor(Actor):
    """Publishes batches in mailbox order, on its own thread.

    Small batches that follow each other in the mailbox (an ordered Publisher sends one
    per key, each as small as its flow control allows) are published together: while
    more mail waits and the next batch, if as large as the last, would still fit one
    fan-out chunk, a batch waits for it. A run never grows past a chunk, so a batch that
    fits one is still fanned out in one, to one snapshot of destinations. Each fan-out
    chunk costs a gate, a ledger reservation and one entry in each group's arrivals
    (each a hand-over later), so a few large chunks cost the parent less than many small ones.
    Nothing waits once the mailbox is empty, so no latency is added; each batch still
    resolves its own future, in order.

    Args:
        path: the topic's publish path (the same guard chain ``Topic.publish`` runs).
    """

    def __init__(self, path: PublishPath) -> None:
        super().__init__()
        self._path = path
        self._waiting: list[PublishBatch] = []
        self._count = 0  # messages in the waiting batches

    def on_receive(self, message: Any) -> Any:
        """Take one `PublishBatch`, `PublishRun` or `PublishEnvelopes`; a failure goes to
        its future or reply, never to the actor."""
        if isinstance(message, PublishBatch):
            if message.future.set_running_or_notify_cancel():
                self._add(message, self._path.room(True), more=not self.actor_inbox.empty())
            return None
        if isinstance(message, PublishRun):
            self._publish_run(message)
            return None
        if isinstance(message, PublishEnvelopes):
            self._publish_waiting()  # in mailbox order
            if message.future.set_running_or_notify_cancel():
                _resolve(message.future, self._path.publish_envelopes, message.envelopes)
            return None
        self._publish_waiting()
        return None

    def _add(self, batch: PublishBatch, chunk: int, *, more: bool) -> None:
        """Queue ``batch`` behind the waiting ones; publish them unless ``more`` batches
        follow at once and the next, if as large, would still fit the run's ``chunk``
        (`PublishPath.room`)."""
        if self._count + len(batch.datas) > chunk:
            self._publish_waiting()  # a batch that fits one chunk is never split
        self._waiting.append(batch)
        self._count += len(batch.datas)
        if not (
            more and self._count + len(batch.datas) <= chunk
            and len(self._waiting) < _MAX_MERGED
        ):
            self._publish_waiting()

    def _publish_run(self, run: PublishRun) -> None:
        """Publish a run's batches as consecutive `PublishBatch` messages would be, then
        reply once with their outcomes."""
        slots = [_Slot() for _ in run.parts]
        chunk = self._path.room(True)
        for (datas, attributes, keys), slot in zip(run.parts, slots, strict=True):
            self._add(PublishBatch(datas, attributes, keys, slot), chunk, more=True)
        self._publish_waiting()
        try:
            run.reply([slot.outcome for slot in slots])
        except Exception:  # the sender's bug: the topic goes on
            logger.exception("the reply to a publish run of %d batches failed", len(slots))

    def on_stop(self) -> None:
        self._publish_waiting()  # the topic is closing: they fail, each in its future

    def _publish_waiting(self) -> None:
        batches, self._waiting, self._count = self._waiting, [], 0
        if len(batches) == 1:
            _publish_one(self._path, batches[0])
        elif batches:
            _publish_merged(self._path, batches)


class _Slot:
    """Where the topic actor leaves one batch of a `PublishRun`'s outcome."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome: BatchOutcome = (None, None)

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result: Sequence[str]) -> None:
        self.outcome = (result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self.outcome = (exception.ids, exception.error) if isinstance(
            exception, PartlyPublished) else (None, exception)


def _publish_one(path: PublishPath, batch: PublishBatch) -> None:
    _resolve(batch.future, path.publish_parts, batch.datas, batch.attributes, batch.keys)


def _resolve(future: Resolvable, publish: Any, *args: Any) -> None:
    try:
        ids = publish(*args)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(ids)


def _publish_merged(path: PublishPath, batches: list[PublishBatch]) -> None:
    """Publish ``batches`` as one run of messages; each future gets its own ids, or, for
    the batch the topic stopped accepting in, the accepted prefix (`PartlyPublished`),
    and the error for every batch after it."""
    datas: list[bytes] = []
    attributes: list[dict[str, str]] = []
    for batch in batches:
        datas += batch.datas
        attributes += batch.attributes
    keys = _merged_keys([batch.keys for batch in batches])
    error: BaseException | None = None
    try:
        ids = path.publish_parts(datas, attributes, keys)
    except PartlyPublished as partial:
        ids, error = partial.ids, partial.error
    except BaseException as exc:
        ids, error = [], exc
    start = 0
    for batch in batches:
        end = start + len(batch.datas)
        if end <= len(ids):
            batch.future.set_result(ids[start:end])
        elif start < len(ids):
            batch.future.set_exception(PartlyPublished(list(ids[start:]), _given(error)))
        else:
            batch.future.set_exception(_given(error))
        start = end


def _merged_keys(columns: list[list[str | None]]) -> Sequence[str | None]:
    """The key columns of merged batches as one: `Runs` when each batch has one key (an
    ordered Publisher's), so the group routes the chunk a run at a time instead of
    reading each message's key; else one list."""
    columns = [keys for keys in columns if keys]
    if all(keys.count(keys[0]) == len(keys) for keys in columns):
        return Runs([keys[0] for keys in columns], [len(keys) for keys in columns])
    return list(chain.from_iterable(columns))


def _given(error: BaseException | None) -> BaseException:
    assert error is not None  # a batch lacks ids only when publishing failed
    return error


class BatchSeam:
    """The batch half of `Topic` (a mixin over its name, path, actor and state): every
    call tells the topic actor and never blocks."""

    _name: str
    _path: PublishPath
    _actor: Ref
    _ledger: Ledger
    _state_lock: threading.Lock
    _torn_down: bool

    def _publish_batch(self, messages: list[Message]) -> Future[Sequence[str]]:
        """`_publish_parts` for prepared `Message` objects (an empty key is no key)."""
        return self._publish_parts(*parts_of(messages))

    def _publish_parts(
        self, datas: list[bytes], attributes: list[dict[str, str]], keys: list[str | None],
    ) -> Future[Sequence[str]]:
        """Publish a Publisher batch, as parallel lists, in one mailbox message.

        Never blocks. The future resolves with the ids in order once every message was
        accepted, or fails (nothing of the batch delivered for a closed topic or a
        type error).
        """
        future: Future[Sequence[str]] = Future()
        return self._tell_publish(PublishBatch(datas, attributes, keys, future), future)

    def _publish_run(
        self, parts: list[tuple[list[bytes], list[dict[str, str]], list[str | None]]],
        reply: Callable[[list[BatchOutcome]], None],
    ) -> None:
        """Publish several Publisher batches in one mailbox message (`PublishRun`).

        Never blocks. ``reply`` gets each batch's ids or failure, in order, once: in
        the topic's thread, or in this one when the topic is closed.
        """
        with self._state_lock:
            if not (self._ledger.closed or self._torn_down):
                self._actor.tell(PublishRun(parts, reply))
                return
        reply([(None, TopicClosedError(self._name))] * len(parts))

    def _stamp_parts(
        self, datas: list[bytes], attributes: list[dict[str, str]], keys: list[str | None],
    ) -> Sequence[Any]:
        """Accept a batch ahead of its publish (ids and publish time given now): a staged
        sink part, published when its batch commits (`_publish_envelopes`).

        Raises:
            TopicClosedError, MessageTypeError, TypeError: as `_publish_parts`'s future.
        """
        return self._path.stamp_parts(datas, attributes, keys)

    def _publish_envelopes(self, envelopes: Sequence[Any]) -> Future[Sequence[str]]:
        """`_publish_parts` for the envelopes of `_stamp_parts`."""
        future: Future[Sequence[str]] = Future()
        return self._tell_publish(PublishEnvelopes(envelopes, future), future)

    def _tell_publish(self, message: Any, future: Future[Sequence[str]]) -> Future[Sequence[str]]:
        with self._state_lock:
            if self._ledger.closed or self._torn_down:
                future.set_exception(TopicClosedError(self._name))
            else:
                self._actor.tell(message)
        return future
