"""Admitted messages on their way from `Publisher.publish` to the Publisher actor."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

from runtime._message import Message

__all__ = ["Intake"]


class Intake:
    """A hand-off between publishing threads and the Publisher actor.

    Publishers append under the flow-control gate's lock and tell the actor only when
    the intake goes from empty to non-empty; the actor takes everything at once (same
    lock) and batches it. A burst of publishes is then one mailbox message, not one
    per publish. Order holds: everything appended before a later mailbox message
    (flush, send-now) was appended before that message's doorbell was processed, so
    the actor has taken it by then.

    Three parallel lists rather than a tuple per message: no per-message container
    for the garbage collector to track while a backlog waits here.
    """

    __slots__ = ("futures", "messages", "sizes")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.futures: list[Future[str]] = []
        self.sizes: list[int] = []

    def put(self, message: Message, future: Future[str], size: int) -> bool:
        """Append (gate lock held); True when the actor must be told (it was empty)."""
        messages = self.messages
        messages.append(message)
        self.futures.append(future)
        self.sizes.append(size)
        return len(messages) == 1

    def take(self) -> Iterator[tuple[Message, Future[str], int]]:
        """Everything appended so far, in order (gate lock held while taking)."""
        taken = zip(self.messages, self.futures, self.sizes, strict=True)
        self.messages, self.futures, self.sizes = [], [], []
        return taken
