"""The balanced group actor: one bounded queue per (topic, group), credit-based dispatch.

Its queues (an unkeyed FIFO, one bucket per member, retries): sorting a fan-out chunk
in (`sort_by_key`), taking a member's share out (`take_share`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain, groupby, islice, repeat
from operator import itemgetter
from typing import Any, Protocol

from actors import Actor, Ref
from runtime.core._block import Block, Runs, join_envelopes, keys_of, picker
from runtime.core._envelope import SEQ, Envelope
from runtime.core.settlement._claims import claim_all
from runtime.core.settlement._delivery import Delivery
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._gate import ARRIVED, Arrivals, Chunk, Gate, KeyMark
from runtime.core.subscribers._group_mail import Credit, End, Endpoint, Join, Leave, Requeue

__all__ = ["Fifo", "GroupActor", "gather_runs", "picked", "sort_by_key", "split_keyed", "take_share"]

# A chunk with fewer key changes than this share of its messages moves run by run.
_RUNS_SHARE = 8


class Fifo:
    """A queue of envelopes, held as the pieces they arrived in (a topic's `Block`s,
    lists): queuing a chunk and taking a hand-over touch no message of their own, and a
    hand-over of blocks leaves as one block (`join_envelopes`). Pieces are never changed
    (the topic shares a chunk between its groups): a partly taken one is read from an
    offset. ``size`` is how many it holds."""

    __slots__ = ("_head", "_pieces", "size")

    def __init__(self) -> None:
        self._pieces: deque[Sequence[Envelope]] = deque()
        self._head = 0  # of the first piece, how many were taken
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Envelope]:
        pieces = iter(self._pieces)
        first = next(pieces, ())
        return chain(islice(first, self._head, None), chain.from_iterable(pieces))

    def extend(self, envelopes: Sequence[Envelope]) -> None:
        """Queue ``envelopes`` (a sequence nobody changes any more) behind the rest."""
        if envelopes:
            self._pieces.append(envelopes)
            self.size += len(envelopes)

    def pieces(self) -> list[Sequence[Envelope]]:
        """The queued pieces in order, the first from where taking stopped."""
        pieces = list(self._pieces)
        if pieces and self._head:
            pieces[0] = pieces[0][self._head:]
        return pieces

    def clear(self) -> None:
        self._pieces.clear()
        self._head = self.size = 0

    def take(self, count: int) -> Sequence[Envelope]:
        """Dequeue up to ``count`` from the front, as one sequence."""
        pieces, head = self._pieces, self._head
        if count >= self.size and not head:  # all of it (most hand-overs): in C
            taken: list[Sequence[Envelope]] = list(pieces)
            pieces.clear()
            self.size = 0
            if len(taken) == 1:  # most hand-overs: one piece, nothing to join
                return taken[0]
            return join_envelopes(taken) if taken else []
        need = min(count, self.size)
        self.size -= need
        taken = []
        while need:
            piece = pieces[0]
            left = len(piece) - head
            if left > need:
                taken.append(piece[head:head + need])
                head += need
                break
            taken.append(piece[head:] if head else piece)
            pieces.popleft()
            head, need = 0, need - left
        self._head = head
        return join_envelopes(taken) if taken else []


def split_keyed(pieces: list[Sequence[Envelope]]) -> tuple[Fifo, list[Envelope]]:
    """``pieces``' unkeyed messages as a `Fifo` and their keyed ones as a list, each in
    order. A piece without keys joins the queue as it is: a group's backlog of blocks is
    not rebuilt message by message when its members change (it was, as one list of
    envelopes, which every later hand-over then read message by message)."""
    queue, keyed = Fifo(), list[Envelope]()
    for piece in pieces:
        keys = keys_of(piece)
        if keys.count(None) == len(keys):
            queue.extend(piece)
            continue
        unkeyed: list[Envelope] = []
        for envelope, key in zip(piece, keys, strict=True):
            (unkeyed if key is None else keyed).append(envelope)
        queue.extend(unkeyed)
    return queue, keyed


class _Queue(Protocol):  # a `Fifo`, or a deque in tests
    def extend(self, envelopes: Sequence[Envelope], /) -> None: ...


def sort_by_key(
    envelopes: Sequence[Envelope], members: list[int], queue: _Queue,
    buckets: dict[int, Fifo] | dict[int, deque[Envelope]],
) -> None:
    """Append unkeyed ``envelopes`` to ``queue`` and keyed ones to the bucket of the
    member their key hashes to (``members``: the members' keys), keeping their order.

    Every key is hashed (once per distinct key, into a key -> queue table) before
    anything moves, so a chunk with a bad key is refused whole. A chunk with one key
    (or none) then moves whole; merged batches' keys (`Runs`, one run each) move run by
    run without a key read (`_move_runs`); other chunks as `_move_each` says.

    Raises:
        Exception: whatever hashing a key raised (e.g. ``TypeError`` for a list).
    """
    keys = keys_of(envelopes)
    alike = keys.count(keys[0]) == len(keys)  # most chunks: no key, or an ordered batch's one
    merged = keys if type(keys) is Runs and not keys.step else None  # read run by run
    count = len(members)
    route: dict[str | None, _Queue] = {
        key: queue if key is None else buckets[members[hash(key) % count]]
        for key in ({keys[0]} if alike else set(merged.values) if merged else set(keys))}
    if alike:
        route[keys[0]].extend(envelopes)
    elif merged and type(envelopes) is Block:  # (only a block's keys are `Runs`)
        _move_runs(envelopes, merged, route)
    else:
        _move_each(envelopes, keys, route)


def _move_runs(block: Block, keys: Runs, route: dict[str | None, _Queue]) -> None:
    """The runs of ``block`` bound for each queue, gathered into one block (`gather_runs`)."""
    chosen = _list_per_queue(route)
    for index, key in enumerate(keys.values):
        chosen[id(route[key])][1].append(index)
    for target, indices in chosen.values():
        target.extend(gather_runs(block, keys, indices))


def _move_each(
    envelopes: Sequence[Envelope], keys: Sequence[str | None], route: dict[str | None, _Queue],
) -> None:
    """Runs of one key (an ordered Publisher sends a batch per key) move as slices, found
    by ``groupby`` over the keys in C; interleaved keys are gathered message by message
    into one list per queue (a block's into one block per queue: `picked`): fewer
    Python-level steps per message than routing each message by its own hash."""
    most = len(keys) // _RUNS_SHARE + 1  # past this many, the runs are not worth reading
    runs = [(key, len(list(run))) for key, run in islice(groupby(keys), most)]
    if len(runs) * _RUNS_SHARE < len(keys):
        start = 0
        for key, size in runs:
            route[key].extend(envelopes[start:start + size])
            start += size
        return
    gathered = _list_per_queue(route)
    lists = {key: gathered[id(target)][1] for key, target in route.items()}
    if type(envelopes) is Block:  # its positions, then its columns picked: no envelope
        for index, key in enumerate(keys):
            lists[key].append(index)
        for target, chosen in gathered.values():
            if chosen:
                target.extend(picked(envelopes, chosen))
        return
    for envelope, key in zip(envelopes, keys, strict=True):
        lists[key].append(envelope)
    for target, items in gathered.values():
        target.extend(items)


def _list_per_queue(route: dict[str | None, _Queue]) -> dict[int, tuple[_Queue, list[Any]]]:
    """An empty list for each queue of ``route``, by the queue's id (keys may share one)."""
    return {id(target): (target, []) for target in route.values()}


def gather_runs(block: Block, keys: Runs, chosen: list[int]) -> Block:
    """The messages of ``block`` in the runs of its ``keys`` (`Runs` of one key each:
    merged batches) numbered ``chosen`` (increasing), as one block.

    A group sends a chunk's runs of a key to their members' queues. Sliced run by run,
    a chunk of many batches made one block per batch, joined again at each hand-over;
    gathered, it is one block whose numbers and keys stay runs.
    """
    ends, seqs, stamps = keys.ends(), block.seqs, block.stamps
    sizes = [keys.counts[i] for i in chosen]
    spans = [(ends[i] - size, ends[i]) for i, size in zip(chosen, sizes, strict=True)]
    numbers = (Runs([seqs.start + start for start, _ in spans], sizes, 1)
               if type(seqs) is range else _gathered(seqs, spans))
    attributes = None if block.attributes is None else _gathered(block.attributes, spans)
    return Block(numbers, _gathered(block.payloads, spans),
                 Runs([keys.values[i] for i in chosen], sizes), attributes, block.topic,
                 stamps if isinstance(stamps, float) else _gathered(stamps, spans))


def picked(block: Block, chosen: list[int]) -> Block:
    """The messages of ``block`` at the positions ``chosen`` (increasing), as one block
    whose columns are picked in C (`picker`)."""
    pick = picker(chosen)
    keys, attributes, stamps = block.keys, block.attributes, block.stamps
    return Block(pick(block.seqs), pick(block.payloads), None if keys is None else pick(keys),
                 None if attributes is None else pick(attributes), block.topic,
                 stamps if isinstance(stamps, float) else pick(stamps))


def _gathered(column: Sequence[Any], spans: list[tuple[int, int]]) -> list[Any]:
    gathered: list[Any] = []
    for start, end in spans:
        gathered += column[start:end]
    return gathered


def take_share(
    bucket: Fifo | None, retries: deque[tuple[Envelope, int]], queue: Fifo, room: int,
    share: int,
) -> tuple[Sequence[Envelope], list[int] | None]:
    """Dequeue a member's keyed messages (its ``bucket``), then ``retries`` and unkeyed
    ones from ``queue`` up to ``share`` more, at most ``room`` in all; returns them and
    their attempts (None: all first ones)."""
    pieces = [bucket.take(room)] if bucket is not None and bucket.size else []
    taken = len(pieces[0]) if pieces else 0
    limit = min(room, taken + share)
    attempts: list[int] | None = None
    if retries and taken < limit:
        attempts = [1] * taken
        retried = []
        while retries and taken < limit:
            envelope, attempt = retries.popleft()
            retried.append(envelope)
            attempts.append(attempt)
            taken += 1
        pieces.append(retried)
    if queue.size and taken < limit:
        unkeyed = queue.take(limit - taken)
        pieces.append(unkeyed)
        if attempts is not None:
            attempts.extend(repeat(1, len(unkeyed)))
    if len(pieces) == 1:  # most hand-overs: one piece, nothing to join
        return pieces[0], attempts
    return (join_envelopes(pieces) if pieces else []), attempts


logger = logging.getLogger(__name__)

# Mailbox messages a group handles at most before it dispatches, even while more wait.
_MAX_DEFERRED = 16

# Handler time under which unkeyed messages are not worth splitting across members: a
# hand-over to a worker costs the parent its build, pickle, pipe write and answer, so a
# split that saves less than this in the slower half only adds hand-overs (re-measure
# with ``python -m benchmarks --only fanout_cpu``).
SPLIT_WORTH = 200e-6
_LOAD = itemgetter(0)  # of a ready member's (load, member, room)
_SEQ_OF = itemgetter(SEQ)


class GroupActor(Actor):
    """Holds a group's queued messages and hands them to members with credit.

    Unkeyed messages wait in one FIFO and go to the members with the least work left
    (their unsettled deliveries, less what a worker's running hand-over has done; ties
    rotate), split evenly when several have room, so a trickle of slow messages spreads
    over every member. Keyed ones wait in a FIFO per member chosen by
    key hash, so one key's messages keep their order while membership is stable.
    Redeliveries go first. Every message that leaves the queue gives its gate room back.

    Args:
        topic: the topic's name (unused but for names and logs).
        name: the group's name.
        gate: the group's room counter, shared with publishers.
        ledger: the topic's books (for hand-overs and settlements).
        tracker: the tracker actor, the sink of settlements.
        arrivals: where publishers leave fan-out chunks (see `Arrivals`).
    """

    def __init__(
        self, topic: str, name: str, gate: Gate, ledger: Ledger, tracker: Ref, arrivals: Arrivals,
    ) -> None:
        super().__init__()
        self._arrivals = arrivals
        self._topic = topic
        self._name = name
        self._gate = gate
        self._ledger = ledger
        self._tracker = tracker
        self._queue = Fifo()
        self._retries: deque[tuple[Envelope, int]] = deque()
        self._buckets: dict[int, Fifo] = {}
        self._members: list[Endpoint] = []
        self._unsettled: dict[int, int] = {}  # deliveries handed over, not credited back
        self._inflight: dict[int, int] = {}  # hand-overs handed over, not credited back
        self._ended: tuple[str, str | None] | None = None  # (reason, error) once ended
        self._stranded: list[Envelope] = []  # a chunk whose acceptance failed midway
        self._turn = 0  # rotates who goes first among equally loaded members
        self._deferred = 0  # mail handled since the last dispatch

    def on_receive(self, message: Any) -> Any:
        """Handle one mailbox message (`ARRIVED`: fan-out chunks wait in the arrivals).

        The group's books (queue, members, credit) live in this instance, so a restart
        would start empty and strand what waits. A failure here ends the group instead,
        loudly: what waits and every later message is dead-lettered ``dropped`` with the
        failure's text (in-flight deliveries settle as usual).
        """
        try:
            if message is ARRIVED:
                self._accept_arrivals(self._arrivals.take())
            elif type(message) is Credit:
                if message.key in self._unsettled:  # else it left: its books went with it
                    self._unsettled[message.key] -= message.count
                    self._inflight[message.key] -= message.handovers
            elif isinstance(message, Requeue):
                self._requeue(message.items)
            elif isinstance(message, Join):
                self._join(message.endpoint)
            elif isinstance(message, Leave):
                self._leave(message.key)
            elif isinstance(message, End):
                self._end(message.reason)
                return None
            if self._deferred < _MAX_DEFERRED and not self.actor_inbox.empty():
                # More mail is waiting (chunks, credit): let it accumulate and dispatch
                # after it, in fewer, larger hand-overs. The last message of a burst
                # always dispatches, so nothing waits once the mailbox is empty.
                self._deferred += 1
                return None
            self._deferred = 0
            self._dispatch()
            self._lend()
        except Exception as exc:
            self._fail(exc)
        return None

    def _fail(self, exc: Exception) -> None:
        """End the group after a failure of its own: dead-letter what waits (and what a
        failed acceptance held) ``dropped`` with the failure's text."""
        logger.error("balanced group %r of topic %r failed; it now dead-letters what it "
                     "gets", self._name, self._topic, exc_info=exc)
        error = f"group {self._name!r} failed: {type(exc).__qualname__}: {exc}"
        stranded, self._stranded = self._stranded, []
        self._end("dropped", error)
        self._settle([(e, 1) for e in stranded], "dropped", error)

    def _lend(self) -> None:
        """Lend the gate what the members can take at once: in all (for unkeyed
        messages), and the least any one can take of its keys (a keyed message goes to
        one member). A worker process's keyed room is at least its next hand-over,
        within its prefetch: what waits for a busy worker leaves as its next hand-over
        (held to the capacity, a worker's keyed hand-overs stayed much smaller than its
        unkeyed ones)."""
        room, least = 0, -1
        if self._ended is None:
            unsettled, inflight = self._unsettled, self._inflight
            for member in self._members:
                free = member.window - unsettled[member.key]
                limit = member.handovers
                if limit is None:
                    free = keyed = max(free, 0)
                else:
                    cap = member.cap()
                    free = max(min(free, (limit - inflight[member.key]) * cap), 0)
                    keyed = max(free, min(cap, member.window))
                room += free
                least = keyed if least < 0 else min(least, keyed)
        self._gate.lend(room, max(least, 0))

    def _join(self, endpoint: Endpoint) -> None:
        self._members.append(endpoint)
        self._unsettled[endpoint.key] = 0
        self._inflight[endpoint.key] = 0
        self._rebucket()

    def _leave(self, key: int) -> None:
        self._members = [m for m in self._members if m.key != key]
        self._unsettled.pop(key, None)
        self._inflight.pop(key, None)
        self._rebucket()

    def _end(self, reason: str, error: str | None = None) -> None:
        items: list[tuple[Envelope, int]] = list(self._retries)
        items.extend((e, 1) for e in self._queue)
        for bucket in self._buckets.values():
            items.extend((e, 1) for e in bucket)
        self._retries.clear()
        self._queue.clear()
        self._buckets = {m.key: Fifo() for m in self._members}
        self._ended = (reason, error)
        self._settle(items, reason, error)

    def _settle(
        self, items: list[tuple[Envelope, int]], reason: str, error: str | None = None,
    ) -> None:
        """Dead-letter queued messages that will never reach a member."""
        if not items:
            return
        self._gate.release(len(items))
        name = self._name
        self._ledger.settle_unreached(
            items, reason,
            lambda e, attempt: Delivery.settled(e, -1, name, attempt - 1, reason, error))

    def _dispatch(self) -> None:
        """Hand members with room their keyed messages and shares of the unkeyed ones,
        until nothing waits or nobody has room.

        Unkeyed messages go to the least loaded members first (their unsettled
        deliveries, less what a worker did of its running hand-over; equal loads keep
        the rotating turn, as the sort is stable). When every ready member's handler is
        known to take them all in less than `SPLIT_WORTH`, the first takes them all.
        Else each is topped up toward an equal load across all members, so a member that
        answers first does not take what its busy peers will take next; the first always
        gets at least one, so a message never waits while a member has room.
        """
        members, unsettled, inflight = self._members, self._unsettled, self._inflight
        while members and self._ended is None:
            unkeyed = self._queue.size + len(self._retries)
            if not unkeyed:
                for bucket in self._buckets.values():
                    if bucket.size:
                        break
                else:
                    return
            ready: list[tuple[int, Endpoint, int]] = []  # (load, member, room)
            total = 0
            for member in members:
                load = member.left(unsettled[member.key])
                total += load
                limit = member.handovers
                if limit is not None and inflight[member.key] >= limit:
                    continue
                room = min(member.window - unsettled[member.key], member.cap())
                if room > 0:
                    ready.append((load, member, room))
            if not ready:
                return
            self._turn += 1
            turn = self._turn % len(ready)
            ready = ready[turn:] + ready[:turn]
            ready.sort(key=_LOAD)
            whole = True  # every ready member's handler is known to be cheap for them all
            for _, member, _ in ready:
                cost = member.cost
                if cost is None or cost * unkeyed >= SPLIT_WORTH:
                    whole = False
                    break
            target = -(-(total + unkeyed) // len(members))
            sent, least = 0, 1  # the first member's share is at least one
            for load, member, room in ready:
                if whole:
                    share, unkeyed = unkeyed, 0
                else:
                    share, least = max(target - load, least), 0
                sent += self._send(member, room, share)
            if not sent:
                return

    def _send(self, member: Endpoint, room: int, share: int) -> int:
        """Hand ``member`` its keyed messages and up to ``share`` unkeyed ones, at most
        ``room`` in all; returns how many went."""
        envelopes, attempts = take_share(
            self._buckets.get(member.key), self._retries, self._queue, room, share)
        if not envelopes:
            return 0
        self._gate.hand_on(len(envelopes))
        handover, out = member.hand_over(self._tracker, self._name, envelopes, attempts)
        if not self._ledger.register(handover):
            self._ledger.settle(claim_all(handover, "closed"))
            return len(envelopes)
        self._unsettled[member.key] += len(envelopes)
        self._inflight[member.key] += 1
        member.push(handover, out)
        return len(envelopes)

    # -- the queue: chunks arriving from the topic, sorted in by key -----------------

    def _accept_arrivals(self, arrived: list[Chunk]) -> None:
        """Queue the chunks that arrived, in order.

        The topic marks each chunk (`KeyMark`), so no key is read here: one without keys
        goes to the FIFO as it is, one of a single key (an ordered Publisher's batch) to
        that key's member. A burst of one-at-a-time publishes (one-message chunks, not
        blocks) is joined first: without keys it is queued as one piece, with mixed keys
        sorted as one (one pass over the burst instead of one per publish). Unless a key
        does not hash (`sort_by_key` hashes every key before it moves anything): then
        chunk by chunk, so only that key's own chunk is refused (with fewer than two
        members nothing is hashed or checked).
        """
        chunks: list[Sequence[Envelope]] = []
        marks: list[KeyMark] = []
        for chunk, mark in arrived:
            chunks.append(chunk)
            marks.append(mark)
        keyed = marks.count(False) != len(marks)
        burst = len(chunks) > 1 and Block not in map(type, chunks)
        if burst and not keyed:
            chunks = [join_envelopes(chunks)]
        if keyed and self._ended is None and len(self._members) > 1:  # keys to route
            if True not in marks:
                self._route(chunks, marks)
                return
            if burst and self._sorted(join_envelopes(chunks)):
                return
        # Unkeyed messages may go to any member; for one member, one FIFO keeps key order.
        queued = self._ended is None and (not keyed or len(self._members) < 2)
        for index, chunk in enumerate(chunks):
            try:
                if queued:
                    self._queue.extend(chunk)
                else:
                    self._accept(chunk, keyed)
            except Exception:  # what it took and did not queue is nowhere else
                self._strand(chunk, chunks[index + 1:])
                raise

    def _strand(self, failed: Sequence[Envelope], later: list[Sequence[Envelope]]) -> None:
        """Keep what a failed acceptance took and did not queue, and the chunks after it."""
        held = set(map(_SEQ_OF, self._queue))
        held.update(e[SEQ] for bucket in self._buckets.values() for e in bucket)
        self._stranded = [e for e in failed if e[SEQ] not in held]
        self._stranded.extend(e for chunk in later for e in chunk)

    def _route(self, chunks: list[Sequence[Envelope]], marks: list[KeyMark]) -> None:
        """Queue chunks of no key or of one key each whole, as `sort_by_key` would
        route their messages (sorting would read every key of every chunk)."""
        members = [m.key for m in self._members]
        queue, buckets, count = self._queue, self._buckets, len(members)
        for chunk, mark in zip(chunks, marks, strict=True):
            if mark is False:
                queue.extend(chunk)
            else:  # a str: hashing it cannot fail
                buckets[members[hash(mark) % count]].extend(chunk)

    def _sorted(self, merged: Sequence[Envelope]) -> bool:
        """Sort a merged burst of keyed chunks in; False (nothing moved) when a key does
        not hash (checking that every key hashes first would read every key twice)."""
        try:
            sort_by_key(merged, [m.key for m in self._members], self._queue, self._buckets)
        except Exception:
            return False
        return True

    def _accept(self, envelopes: Sequence[Envelope], keyed: bool = True) -> None:
        if self._ended is not None:
            self._settle([(e, 1) for e in envelopes], *self._ended)
            return
        members = self._members
        # Unkeyed messages may go to any member; for one member, one FIFO keeps key order.
        if not keyed or len(members) < 2 or not envelopes:
            self._queue.extend(envelopes)
            return
        try:  # every key hashed before anything moves: a bad chunk is refused whole
            sort_by_key(envelopes, [m.key for m in members], self._queue, self._buckets)
        except Exception as exc:  # a key that slipped past the boundary's check
            logger.error("group %r refused %d messages: %r", self._name, len(envelopes), exc)
            # "dropped", not "error": a retry would meet the same key (and loop).
            self._settle([(e, 1) for e in envelopes], "dropped", f"unhashable key: {exc}")
            return

    def _requeue(self, items: tuple[tuple[Envelope, int], ...]) -> None:
        if self._ended is not None:
            self._settle(list(items), *self._ended)
        else:
            self._retries.extend(items)

    def _rebucket(self) -> None:
        """Re-route keyed messages after a membership change (per-key order kept); the
        queue's pieces without keys stay as they are."""
        self._queue, keyed = split_keyed(self._queue.pieces())
        for bucket in self._buckets.values():
            keyed.extend(bucket)
        self._buckets = {m.key: Fifo() for m in self._members}
        if len(self._members) > 1:
            self._accept(keyed)
        else:
            self._queue.extend(keyed)
