"""A topic's subscribers: balanced groups and their members, broadcast subscribers."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from actors import ActorSystem, Pool, Ref
from actors.errors import ActorError
from runtime.core._envelope import Envelope
from runtime.core._settings import TopicSettings
from runtime.core.settlement._delivery import Delivery, HandOver
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._broadcast import WAKE, BroadcastActor
from runtime.core.subscribers._flusher import CallLater
from runtime.core.subscribers._gate import Arrivals, Gate, GroupHandle
from runtime.core.subscribers._group import GroupActor
from runtime.core.subscribers._group_mail import End, Join, Leave, Requeue
from runtime.core.subscribers._member import THREAD_WINDOW, Handler, MemberActor, Seat, ThreadEndpoint
from runtime.core.subscribers._progress import Progress
from runtime.core.subscribers._pull import PullEndpoint
from runtime.core.subscribers._ring import Ring
from runtime.core.subscribers._subscription import PullSubscription, RingSource, Subscription
from runtime.core.subscribers._workers import ProcessEndpoint, WorkerActor

__all__ = ["Subscribers"]

logger = logging.getLogger(__name__)

# Bound on each ask to a group actor and each actor stop.
_ASK_TIMEOUT = 10.0


class _Group:
    """A group's handle plus its members' seats (by subscription id)."""

    def __init__(self, handle: GroupHandle) -> None:
        self.handle = handle
        self.seats: dict[int, Seat] = {}
        self.pulls: dict[int, PullEndpoint] = {}


class Subscribers:
    """Creates and removes a topic's groups and subscribers (each one an actor).

    Args:
        topic: the topic's name.
        settings: the topic's settings.
        system: where actors are spawned.
        ledger: the topic's books.
        ring: the broadcast ring.
        tracker: the tracker actor.
        prefix: prefix of actor names.
        call_later: the bus's timer (thread subscribers send settlements while a batch
            runs).
    """

    def __init__(
        self, *, topic: str, settings: TopicSettings, system: ActorSystem, ledger: Ledger,
        ring: Ring, tracker: Ref, prefix: str, call_later: CallLater,
    ) -> None:
        self._call_later = call_later
        self._topic = topic
        self._settings = settings
        self._system = system
        self._ledger = ledger
        self._ring = ring
        self._tracker = tracker
        self._prefix = prefix
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._keys = itertools.count(1)
        self._groups: dict[str, _Group] = {}
        # The balanced groups: replaced whole on each change, so a reader without the
        # lock holds a snapshot.
        self.handles: list[GroupHandle] = []
        self._broadcast: dict[int, Seat] = {}
        self._retired: list[Ref] = []
        self._pools: list[tuple[Pool, Progress]] = []

    def names(self) -> list[str]:
        """The groups' names, in creation order."""
        return [h.name for h in self.handles]

    def create_group(self, name: str) -> GroupHandle:
        """Return the group ``name``, creating (and spawning) it if needed."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a group name must be a non-empty str, got {name!r}")
        with self._lock:
            group = self._groups.get(name)
            if group is not None:
                return group.handle
            gate, arrivals = Gate(self._settings.balanced_capacity, name=name), Arrivals()
            ref = self._spawn(
                GroupActor, self._topic, name, gate, self._ledger, self._tracker, arrivals,
                name=f"group:{name}.{next(self._keys)}",
            )
            arrivals.bind(ref)
            handle = GroupHandle(name, ref, gate, arrivals)
            self._groups[name] = _Group(handle)
            self.handles = [*self.handles, handle]
            return handle

    def delete_group(self, name: str) -> None:
        """Remove a group: queued messages settle ``unsubscribed``, members stop."""
        with self._lock:
            group = self._groups.pop(name, None)
            if group is None:
                raise KeyError(f"topic {self._topic!r} has no group {name!r}")
            self.handles = [h for h in self.handles if h.name != name]
        group.handle.gate.close()
        self._await_end(group.handle.ref, group.handle.ref.ask(End("unsubscribed"), timeout=None))
        for seat in group.seats.values():
            seat.retire(_ASK_TIMEOUT)
        for pull in group.pulls.values():
            self._requeue(group.handle, pull.close())
        self._retired.append(group.handle.ref)

    def subscribe(
        self, handler: Handler, group: str | None, auto_ack: bool, prefetch: int | None = None,
    ) -> Subscription:
        """Attach a thread subscriber: broadcast (``group=None``) or a group member
        holding up to ``prefetch`` deliveries (None: `THREAD_WINDOW`)."""
        with self._lock:
            seat = Seat(next(self._keys), next(self._ids))
            if group is None:
                seat.ref = self._spawn(
                    BroadcastActor, self._ring, seat, handler, auto_ack, self._ledger,
                    self._tracker, self._call_later, name=f"subscriber:{seat.subscriber_id}",
                )
                self._broadcast[seat.subscriber_id] = seat
                self._ring.add(seat.subscriber_id, _teller(seat.ref))
                return Subscription(seat.subscriber_id, None, lambda: self._unsubscribe(seat))
            handle = self.create_group(group)
            seat.ref = self._spawn(
                MemberActor, handler, auto_ack, handle.ref, seat, self._ledger.renew,
                self._call_later, name=f"member:{seat.subscriber_id}",
            )
            handle.gate.members.add(seat)
            window = THREAD_WINDOW if prefetch is None else prefetch
            self._join(group, seat, ThreadEndpoint(seat, seat.ref, window))
            return Subscription(seat.subscriber_id, group, lambda: self._leave(group, seat))

    def subscribe_workers(
        self, handler: Handler, group: str, auto_ack: bool, workers: int,
        prefetch: int | None = None,
    ) -> Subscription:
        """Attach ``workers`` worker processes (one `Pool`) as members of ``group``, each
        holding up to ``prefetch`` deliveries (None: two hand-overs)."""
        with self._lock:
            sid = next(self._ids)
            handle = self.create_group(group)
            pool = self._system.pool(
                WorkerActor, handler, auto_ack, size=workers, process=True,
                name=f"{self._prefix}/workers:{sid}", stuck_after=_stuck_after(self._settings),
            )
            progress = Progress(workers)
            self._pools.append((pool, progress))
            seats = []
            requeue = partial(self._give_back, handle)
            for slot, worker in enumerate(pool.members()):
                seat = Seat(next(self._keys), sid)
                endpoint = ProcessEndpoint(
                    seat.key, sid, worker, handle.ref, self._tracker,
                    progress=(progress, slot), requeue=requeue, prefetch=prefetch,
                    ack_timeout=self._settings.ack_timeout,
                )
                handle.ref.ask(Join(endpoint), timeout=_ASK_TIMEOUT).result(_ASK_TIMEOUT)
                seats.append(seat)
        return Subscription(
            sid, group, lambda: self._leave_workers(group, seats, pool, progress))

    def stop_pools(self, timeout: float) -> None:
        """Stop every worker pool (at teardown)."""
        with self._lock:
            pools, self._pools = self._pools, []
        for pool, progress in pools:
            try:
                pool.stop(timeout=timeout)
            except Exception:
                logger.warning("worker pool %s did not stop cleanly", pool.name, exc_info=True)
            progress.close()

    def subscription(
        self, group: str | None, prefetch: int = 1, *, tranches: bool = False,
    ) -> PullSubscription[Any]:
        """Attach a pull subscriber (reads the ring, or is a group member with a prefetch;
        with ``tranches``, a lease member reading whole hand-overs)."""
        with self._lock:
            seat = Seat(next(self._keys), next(self._ids))
            sid = seat.subscriber_id
            if group is None:
                self._ring.add(sid, None)
                source = RingSource(self._ring, sid, self._ledger, self._tracker)
                return PullSubscription(sid, None, source, lambda: self._unsubscribe(seat),
                                        self._ledger.renew)
            handle = self.create_group(group)
            pull = PullEndpoint(seat.key, sid, handle.ref, self._topic, prefetch,
                                tranches=tranches)
            self._groups[group].pulls[sid] = pull
            self._join(group, seat, pull)
            return PullSubscription(sid, group, pull, lambda: self._leave(group, seat),
                                    self._ledger.renew)

    def close(self) -> None:
        """The topic closed: end every group's queue (``closed``), wake pull readers."""
        groups = list(self._groups.values())
        for group in groups:
            group.handle.gate.close()
        futures = [g.handle.ref.ask(End("closed"), timeout=None) for g in groups]
        for group, future in zip(groups, futures, strict=True):
            self._await_end(group.handle.ref, future)
        for group in groups:
            for pull in group.pulls.values():
                pull.close(claim=False)  # prefetched deliveries stay for the "closed" sweep

    def _await_end(self, ref: Ref, future: Future[Any]) -> None:
        """Wait for a group to end its queue, for as long as its actor lives: it dead-letters
        every queued message (a million take seconds), so no fixed bound fits."""
        while True:
            try:
                future.result(_ASK_TIMEOUT)
                return
            except TimeoutError:
                if ref.is_alive():
                    continue
                error: BaseException = TimeoutError("its actor stopped before it answered")
            except ActorError as exc:  # the group's actor is gone (its system gave up)
                error = exc
            logger.warning("topic %s: a group could not end its queue: %s", self._topic, error)
            return

    def refs(self) -> list[Ref]:
        """Every actor spawned, subscribers first (the order to stop them in)."""
        with self._lock:
            seats = [s for g in self._groups.values() for s in g.seats.values()]
            seats.extend(self._broadcast.values())
            refs = [s.ref for s in seats if s.ref is not None]
            refs.extend(g.handle.ref for g in self._groups.values())
            return [*refs, *self._retired]

    def _spawn(self, factory: Any, *args: Any, name: str) -> Ref:
        return self._system.spawn(factory, *args, name=f"{self._prefix}/{name}")

    def _join(self, group: str, seat: Seat, endpoint: Any) -> None:
        record = self._groups[group]
        record.seats[seat.subscriber_id] = seat
        record.handle.ref.ask(Join(endpoint), timeout=_ASK_TIMEOUT).result(_ASK_TIMEOUT)

    def _leave(self, group: str, seat: Seat) -> None:
        with self._lock:
            record = self._groups.get(group)
            if record is None or record.seats.pop(seat.subscriber_id, None) is None:
                return
            pull = record.pulls.pop(seat.subscriber_id, None)
        record.handle.ref.ask(Leave(seat.key), timeout=_ASK_TIMEOUT).result(_ASK_TIMEOUT)
        record.handle.gate.members.discard(seat)
        if pull is not None:
            self._requeue(record.handle, pull.close())
        seat.retire(_ASK_TIMEOUT)
        if seat.ref is not None:
            self._retired.append(seat.ref)

    def _leave_workers(
        self, group: str, seats: list[Seat], pool: Pool, progress: Progress,
    ) -> None:
        with self._lock:
            record = self._groups.get(group)
            if (pool, progress) not in self._pools:
                return  # left already, or stopped with the topic
            self._pools.remove((pool, progress))
        if record is not None:
            for seat in seats:
                record.handle.ref.ask(Leave(seat.key), timeout=_ASK_TIMEOUT).result(_ASK_TIMEOUT)
        pool.stop(timeout=_ASK_TIMEOUT)
        progress.close()

    def _unsubscribe(self, seat: Seat) -> None:
        with self._lock:
            self._broadcast.pop(seat.subscriber_id, None)
        unread = self._ring.remove(seat.subscriber_id)
        if unread:
            self._ledger.settle(
                [Delivery.settled(e, seat.subscriber_id, None, 0, "unsubscribed") for e in unread]
            )
        seat.retire(_ASK_TIMEOUT)
        if seat.ref is not None:
            self._retired.append(seat.ref)

    def _give_back(
        self, handle: GroupHandle, handover: HandOver, items: list[tuple[Envelope, int]],
    ) -> None:
        """A worker died before running ``items`` of ``handover``: back to the group."""
        self._ledger.release(handover)
        self._requeue(handle, items)

    def _requeue(self, handle: GroupHandle, items: list[Any]) -> None:
        if items:
            handle.gate.force(len(items))
            handle.ref.tell(Requeue(tuple(items)))

    def redeliver(self, delivery: Delivery[Any]) -> None:
        """Send a failed balanced delivery back to its group with ``attempt + 1``."""
        group = self._groups.get(delivery.group or "")
        if group is None or group.handle.gate.closed:
            reason = "closed" if self._ledger.closed else "unsubscribed"
            self._ledger.settle([Delivery.settled(
                delivery._envelope, delivery.subscriber_id, delivery.group,
                delivery._attempt, reason,
            )])
            return
        self._requeue(group.handle, [(delivery._envelope, delivery._attempt + 1)])


def _teller(ref: Ref) -> Callable[[], None]:
    return lambda: ref.tell(WAKE)


def _stuck_after(settings: TopicSettings) -> float | None:
    """When a worker's batch has run this long, every delivery in it has already timed
    out (and been redelivered or dead-lettered): the worker is hung, replace it."""
    if settings.ack_timeout is None:
        return None
    return max(1.0, 2 * settings.ack_timeout)
