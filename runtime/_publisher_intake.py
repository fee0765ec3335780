"""Admitted messages on their way from `Publisher.publish` to the Publisher actor."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

from runtime._batching import Parts

__all__ = ["Columns", "Intake"]

# datas, attributes, ordering keys, futures, sizes: one entry per message, in order.
Columns = tuple[
    list[bytes], list[dict[str, str]], list["str | None"], list["Future[str]"], list[int],
]


class Intake:
    """A hand-off between publishing threads and the Publisher actor.

    Publishers append under the flow-control gate's lock and tell the actor only when
    the intake goes from empty to non-empty; the actor takes everything at once (same
    lock) and batches it. A burst of publishes is then one mailbox message, not one
    per publish. Order holds: everything appended before a later mailbox message
    (flush, send-now) was appended before that message's doorbell was processed, so
    the actor has taken it by then.

    A message waits here as its parts in parallel lists (no `Message` and no tuple per
    message yet): a backlog then holds little the garbage collector has to rescan.
    """

    __slots__ = ("attributes", "datas", "futures", "keys", "sizes")

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self.attributes: list[dict[str, str]] = []
        self.keys: list[str | None] = []
        self.futures: list[Future[str]] = []
        self.sizes: list[int] = []

    def put(self, data: bytes, attributes: dict[str, str], key: str | None,
            future: Future[str], size: int) -> bool:
        """Append (gate lock held); True when the actor must be told (it was empty)."""
        futures = self.futures
        futures.append(future)
        self.datas.append(data)
        self.attributes.append(attributes)
        self.keys.append(key)
        self.sizes.append(size)
        return len(futures) == 1

    def take(self) -> Iterator[Parts]:
        """Everything appended so far, in order (gate lock held while taking)."""
        return zip(*self.take_columns(), strict=True)

    def take_columns(self) -> Columns:
        """Everything appended so far as the parallel lists (gate lock held while taking)."""
        taken = (self.datas, self.attributes, self.keys, self.futures, self.sizes)
        self.datas, self.attributes, self.keys, self.futures, self.sizes = [], [], [], [], []
        return taken
