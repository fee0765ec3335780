"""The subscriber side of a topic: subscribe, pull subscriptions, groups."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._member import Handler
from runtime.core.subscribers._subscribers import Subscribers
from runtime.core.subscribers._subscription import PullSubscription, Subscription
from runtime.errors import InvalidSettingsError, TopicClosedError

__all__ = ["Subscribing"]

T = TypeVar("T")


class Subscribing(Generic[T]):
    """The subscriber half of `Topic` (a mixin over its `Subscribers`)."""

    _name: str
    _ledger: Ledger
    _subscribers: Subscribers
    _handles: Callable[[Handler], Handler]

    def _check_open(self) -> None:
        """Raise `TopicClosedError` once the topic is closed."""
        if self._ledger.closed:
            raise TopicClosedError(self._name)

    def subscribe(
        self, handler: Handler, *, group: str | None = None, workers: int = 0,
        auto_ack: bool = False, prefetch: int | None = None,
    ) -> Subscription:
        """Attach ``handler(delivery)``: a broadcast subscriber, or a member of ``group``.

        With ``workers=N`` (needs a group) the handler runs in N worker processes.
        ``prefetch`` (group members): how many deliveries the group may hand a member
        before it settles them (None: up to 32 for a thread member; two hand-overs in
        flight for a worker process, their size growing with the backlog).

        Raises:
            TopicClosedError: the topic is closed.
            InvalidSettingsError: ``workers`` or ``prefetch`` is not valid.
        """
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise InvalidSettingsError("workers", f"must be an int >= 0, got {workers!r}")
        if workers and group is None:
            raise InvalidSettingsError("workers", "process workers need a group")
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1
        ):
            raise InvalidSettingsError("prefetch", f"must be None or an int >= 1, got {prefetch!r}")
        self._check_open()
        if workers and group is not None:
            return self._subscribers.subscribe_workers(handler, group, auto_ack, workers, prefetch)
        return self._subscribers.subscribe(self._handles(handler), group, auto_ack, prefetch)

    def subscription(self, *, group: str | None = None, prefetch: int = 1) -> PullSubscription[T]:
        """A pull subscription: a broadcast reader (``group=None``) or a group member.

        ``prefetch`` (group members): how many deliveries the group may hand this member
        ahead of ``receive``; their ack deadlines run from that hand-over.

        Raises:
            TopicClosedError: the topic is closed.
            InvalidSettingsError: ``prefetch`` is not an int >= 1.
        """
        self._check_open()
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise InvalidSettingsError("prefetch", f"must be an int >= 1, got {prefetch!r}")
        return self._subscribers.subscription(group, prefetch)

    def _lease_member(self, group: str, prefetch: int) -> PullSubscription[T]:
        """A pull member of ``group`` for the broker's lease log: it reads whole
        hand-overs (`PullSubscription.receive_tranches`), no per-message object on the
        all-acked path.

        Raises:
            TopicClosedError: the topic is closed.
        """
        self._check_open()
        return self._subscribers.subscription(group, prefetch, tranches=True)

    def _queued(self, group: str) -> int:
        """Messages ``group`` holds for its members, not handed to one yet (0: no such
        group)."""
        return next((h.gate.used for h in self._subscribers.handles() if h.name == group), 0)

    def create_group(self, name: str) -> None:
        """Create balanced group ``name`` with no members yet (messages wait in it)."""
        self._check_open()
        self._subscribers.create_group(name)

    def groups(self) -> list[str]:
        """The balanced groups' names."""
        return self._subscribers.names()

    def delete_group(self, name: str) -> None:
        """Remove a group; what waits in it is dead-lettered ``unsubscribed``."""
        self._subscribers.delete_group(name)
