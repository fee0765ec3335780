"""A topic's seam for Publishers and the broker: batches in, ids (or failures) out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from actors import Ref
from runtime.core._message import Message, parts_of
from runtime.core._publishing import PublishPath
from runtime.core._topic_actor import BatchOutcome, PublishBatch, PublishEnvelopes, PublishRun
from runtime.core.settlement._ledger import Ledger
from runtime.errors import TopicClosedError

__all__ = ["BatchSeam"]


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
    ) -> list[Any]:
        """Accept a batch ahead of its publish (ids and publish time given now): a staged
        sink part, published when its batch commits (`_publish_envelopes`).

        Raises:
            TopicClosedError, MessageTypeError, TypeError: as `_publish_parts`'s future.
        """
        return self._path.stamp_parts(datas, attributes, keys)

    def _publish_envelopes(self, envelopes: list[Any]) -> Future[Sequence[str]]:
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
