"""The topic actor, which runs Publisher batches through the topic's publish path, and
`BatchSeam`, the topic's calls that feed it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain
from typing import Any

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

# Batches published together, at most (waiting mail, or consecutive batches of a run).
_MAX_MERGED = 16

# A batch's ids, or why it failed (both: the topic accepted only a prefix of it).
BatchOutcome = tuple["Sequence[str] | None", "BaseException | None"]
# A Publisher batch as parallel lists: data, attributes and key per message.
Parts = tuple["list[bytes]", "list[dict[str, str]]", "list[str | None]"]


@dataclass(frozen=True, slots=True)
class PublishBatch:
    """A Publisher batch as parallel lists (data, attributes, key per message);
    ``future`` resolves with the ids in order, or the failure."""

    datas: list[bytes]
    attributes: list[dict[str, str]]
    keys: list[str | None]
    future: Future[Sequence[str]]


@dataclass(frozen=True, slots=True)
class PublishRun:
    """Publisher batches sent together, each ``(datas, attributes, keys)``; ``reply``
    is called once, in the topic's thread, with each batch's `BatchOutcome` in order.

    One mailbox message and one reply for several batches: per batch, a `Future`,
    its callback and a reply message each cost both actors a few microseconds.
    """

    parts: list[Parts]
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
    fits one is still fanned out in one, to one snapshot of destinations. A fan-out chunk
    costs a gate, a ledger reservation and an entry in each group's arrivals: few large
    ones cost the parent less. Nothing waits once the mailbox is empty (no latency is
    added); each batch still resolves its own future, in order.

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
                self._add(message)
            return None
        if isinstance(message, PublishRun):
            self._publish_run(message)
            return None
        if isinstance(message, PublishEnvelopes):
            self._publish_waiting()  # in mailbox order
            if message.future.set_running_or_notify_cancel():
                try:
                    ids = self._path.publish_envelopes(message.envelopes)
                except BaseException as exc:
                    message.future.set_exception(exc)
                else:
                    message.future.set_result(ids)
            return None
        self._publish_waiting()
        return None

    def _add(self, batch: PublishBatch) -> None:
        """Queue ``batch`` behind the waiting ones; publish them unless more mail follows
        and the next batch, if as large, would still fit one chunk (`PublishPath.room`)."""
        chunk, more = self._path.room(True), not self.actor_inbox.empty()
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
        """Publish a run's batches in order, then reply once with their outcomes:
        consecutive ones together while they fit the room (read again after each publish,
        which may have waited for a group's dispatch; without keys, the room any member
        may fill), with no object per batch (its ids are sliced from the merged ones)."""
        self._publish_waiting()  # the mail before the run goes first
        parts, outcomes = run.parts, []
        keyed = any(keys.count(None) != len(keys) for _, _, keys in parts)
        start = 0
        while start < len(parts):
            end = _fitting(parts, start, self._path.room(keyed))
            outcomes += _publish_together(self._path, parts[start:end])
            start = end
        try:
            run.reply(outcomes)
        except Exception:  # the sender's bug: the topic goes on
            logger.exception("the reply to a publish run of %d batches failed", len(parts))

    def on_stop(self) -> None:
        self._publish_waiting()  # the topic is closing: they fail, each in its future

    def _publish_waiting(self) -> None:
        batches, self._waiting, self._count = self._waiting, [], 0
        if batches:
            _publish_merged(self._path, batches)


def _publish_merged(path: PublishPath, batches: list[PublishBatch]) -> None:
    """Publish ``batches`` (one or more) as one run of messages; each future gets its own
    outcome (`_publish_together`)."""
    outcomes = _publish_together(
        path, [(batch.datas, batch.attributes, batch.keys) for batch in batches])
    for batch, (ids, error) in zip(batches, outcomes, strict=True):
        if error is not None:
            batch.future.set_exception(error if ids is None else PartlyPublished(list(ids), error))
            continue
        assert ids is not None  # without an error, always
        batch.future.set_result(ids)


def _fitting(parts: list[Parts], start: int, chunk: int) -> int:
    """Where the batches published together from ``start`` end: at most `_MAX_MERGED`,
    as many as fit ``chunk`` messages (at least one, however large)."""
    end, count = start + 1, len(parts[start][0])
    while end < len(parts) and end - start < _MAX_MERGED:
        count += len(parts[end][0])
        if count > chunk:
            break
        end += 1
    return end


def _publish_together(path: PublishPath, parts: list[Parts]) -> list[BatchOutcome]:
    """Publish batches as one run of messages; each gets its own ids, or, for the batch
    the topic stopped accepting in, the accepted prefix and the refusal, and the
    refusal for every batch after it.

    A refusal of the whole run before anything was accepted (one batch's message of
    the wrong type) belongs to no batch in particular: each batch is then published
    alone, so only the batches it really concerns fail."""
    keys: Sequence[str | None]
    if len(parts) == 1:
        datas, attributes, keys = parts[0]
    else:
        datas, attributes = [], []
        for batch_datas, batch_attributes, _ in parts:
            datas += batch_datas
            attributes += batch_attributes
        keys = _merged_keys([batch_keys for _, _, batch_keys in parts])
    error: BaseException | None = None
    try:
        ids = path.publish_parts(datas, attributes, keys)
    except PartlyPublished as partial:
        ids, error = partial.ids, partial.error
    except BaseException as exc:
        ids, error = [], exc
    if error is None and len(parts) == 1:
        return [(ids, None)]
    if error is not None and not ids and len(parts) > 1:
        return [outcome for part in parts for outcome in _publish_together(path, [part])]
    return _outcomes(parts, ids, error)


def _outcomes(parts: list[Parts], ids: Sequence[str], error: BaseException | None) -> list[BatchOutcome]:
    """Each batch's ids, sliced from the merged ``ids``; past them, the refusal."""
    outcomes: list[BatchOutcome] = []
    start = 0
    for batch_datas, _, _ in parts:
        end = start + len(batch_datas)
        if end <= len(ids):
            outcomes.append((ids[start:end], None))
        elif start < len(ids):
            outcomes.append((list(ids[start:]), _given(error)))
        else:
            outcomes.append((None, _given(error)))
        start = end
    return outcomes


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
