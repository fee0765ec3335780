"""The topic actor: runs Publisher batches through the topic's publish path."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from actors import Actor
from runtime.core._publishing import PublishPath

__all__ = ["PublishBatch", "TopicActor"]


@dataclass(frozen=True, slots=True)
class PublishBatch:
    """A Publisher batch as parallel lists (data, attributes, key per message);
    ``future`` resolves with the ids in order, or the failure."""

    datas: list[bytes]
    attributes: list[dict[str, str]]
    keys: list[str | None]
    future: Future[list[str]]


class TopicActor(Actor):
    """Publishes batches one at a time, in mailbox order, on its own thread.

    Args:
        path: the topic's publish path (the same guard chain ``Topic.publish`` runs).
    """

    def __init__(self, path: PublishPath) -> None:
        super().__init__()
        self._path = path

    def on_receive(self, message: Any) -> Any:
        """Run one `PublishBatch`; its failure goes to its future, never to the actor."""
        if isinstance(message, PublishBatch):
            future = message.future
            if not future.set_running_or_notify_cancel():
                return None
            try:
                ids = self._path.publish_parts(message.datas, message.attributes, message.keys)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(ids)
        return None
