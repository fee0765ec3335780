"""The topic actor, which runs batches through the topic's publish path, in the order
`Topic._publish_batches` sent them, and the batch records they exchange."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain
from typing import Any

from actors import Actor
from runtime.core._block import Block, Runs
from runtime.core._publishing import PartlyPublished, PublishPath
from runtime.errors import MessageTypeError

__all__ = [
    "Batch", "BatchOutcome", "Parts", "PublishBatches", "TopicActor", "batch_ids",
]

logger = logging.getLogger(__name__)

# Batches published together, at most: more merges more of an ordered Publisher's small
# batches into one fan-out, but a refusal then answers more batches at once; re-measure
# with ``python -m benchmarks --only pipeline_pool`` (its ordered rows).
_MAX_MERGED = 16

# A batch's ids, or why it failed (both: the topic accepted only a prefix of it).
BatchOutcome = tuple["Sequence[str] | None", "BaseException | None"]
# A batch as parallel lists: data, attributes and key per message.
Parts = tuple["list[bytes]", "list[dict[str, str]]", "Sequence[str | None]"]
# What `Topic._publish_batches` takes: parts, or a batch accepted ahead of its publish
# (`Topic._stamp_parts`, a broker's staged sink rows).
Batch = Parts | Block

# A check that refuses a batch before any of it is taken: it fails alone.
_REFUSALS = (TypeError, MessageTypeError)


@dataclass(frozen=True, slots=True)
class PublishBatches:
    """The topic actor's one message: ``batches`` in order; ``future`` resolves with
    each batch's `BatchOutcome`, in order (it never fails). ``deadline``
    (``time.monotonic()`` based) ends every wait for room; None: no bound."""

    batches: Sequence[Batch]
    future: Future[list[BatchOutcome]]
    deadline: float | None = None


class TopicActor(Actor):
    """Publishes batches in mailbox order, on its own thread.

    Consecutive batches of one message are published together while they fit one
    fan-out chunk (`PublishPath.room`, read again after each publish): a chunk costs a
    gate, a ledger reservation and an entry in each group's arrivals, so few large ones
    cost the parent less than many small ones (an ordered Publisher sends a batch per
    key). A batch that fits one chunk is never split, so it is fanned out to one
    snapshot of destinations. Each batch still gets its own outcome: one refused by a
    check (a bad key, a wrong type) fails alone, the others are published.

    Args:
        path: the topic's publish path (the same guard chain ``Topic.publish`` runs).
    """

    def __init__(self, path: PublishPath) -> None:
        super().__init__()
        self._path = path

    def on_receive(self, message: Any) -> Any:
        """Take one `PublishBatches`; a failure goes to its outcomes, never to the actor."""
        if isinstance(message, PublishBatches) and message.future.set_running_or_notify_cancel():
            message.future.set_result(self._publish(message.batches, message.deadline))
        return None

    def _publish(self, batches: Sequence[Batch], deadline: float | None) -> list[BatchOutcome]:
        """Each batch's outcome, in order: runs of parts together while they fit the room
        (without keys, the room any member may fill), stamped blocks alone; waits for
        room end at ``deadline``."""
        path, outcomes = self._path, list[BatchOutcome]()
        keyed = False
        for batch in batches:
            if type(batch) is not Block and batch[2].count(None) != len(batch[2]):
                keyed = True
                break
        start = 0
        while start < len(batches):
            first = batches[start]
            if type(first) is Block:
                outcomes.append(_published_alone(path, first, deadline))
                start += 1
                continue
            # The run: at most `_MAX_MERGED` batches, as many as fit the room (at least
            # one, however large), before any block.
            room, end, count = path.room(keyed), start + 1, len(first[0])
            while end < len(batches) and end - start < _MAX_MERGED:
                following = batches[end]
                if type(following) is Block:
                    break
                count += len(following[0])
                if count > room:
                    break
                end += 1
            outcomes += _publish_together(path, batches[start:end], deadline)  # type: ignore[arg-type]
            start = end
        return outcomes


def _published_alone(path: PublishPath, block: Block, deadline: float | None) -> BatchOutcome:
    try:
        return path.publish_envelopes(block, deadline), None
    except PartlyPublished as partial:
        return partial.ids, partial.error
    except BaseException as exc:
        return None, exc


def _publish_together(
    path: PublishPath, parts: Sequence[Parts], deadline: float | None,
) -> list[BatchOutcome]:
    """Publish batches as one run of messages; each gets its own ids, or, for the batch
    the topic stopped accepting in, the accepted prefix and the refusal, and the
    refusal for every batch after it. A check that refuses the run before any of it was
    taken is run again batch by batch: only the batches it refuses fail."""
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
        ids = path.publish_envelopes(path.stamp_parts(datas, attributes, keys), deadline)
    except PartlyPublished as partial:
        ids, error = partial.ids, partial.error
    except _REFUSALS as exc:
        if len(parts) == 1:
            return [(None, exc)]
        return [outcome for part in parts for outcome in _publish_together(path, [part], deadline)]
    except BaseException as exc:
        ids, error = [], exc
    if error is None and len(parts) == 1:
        return [(ids, None)]
    return _outcomes(parts, ids, error)


def _outcomes(parts: Sequence[Parts], ids: Sequence[str], error: BaseException | None) -> list[BatchOutcome]:
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


def _merged_keys(columns: list[Sequence[str | None]]) -> Sequence[str | None]:
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


def batch_ids(outcomes: Future[list[BatchOutcome]]) -> Future[Sequence[str]]:
    """A future of one batch's ids (or its failure: `PartlyPublished` for a prefix)."""
    future: Future[Sequence[str]] = Future()

    def done(resolved: Future[list[BatchOutcome]]) -> None:
        ((ids, error),) = resolved.result()
        if error is None:
            assert ids is not None  # without an error, always
            future.set_result(ids)
        else:
            future.set_exception(error if ids is None else PartlyPublished(list(ids), error))

    outcomes.add_done_callback(done)
    return future
