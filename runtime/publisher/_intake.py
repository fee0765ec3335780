"""Admitted messages on their way from `Publisher.publish` to the Publisher actor."""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress
from typing import Any

from runtime.core._future import MessageFuture, fail_future
from runtime.publisher._flow_control import FlowGate

__all__ = ["YIELD_EVERY", "YIELD_ROWS", "Columns", "Intake", "Row", "reap", "uncounted"]

# A message is six consecutive items of `Intake.rows`: data, attributes, ordering key,
# future, size, counted. ``counted`` is True when the flow-control gate counted the
# message at publish (limits in force), False when nothing limits the Publisher and the
# actor counts it when it takes the message, and None when a credit admitted it (the gate
# counted the message, the actor counts its bytes).
WIDTH = 6
# Spare futures an intake keeps: twice its recent peak drain and 1,024 more, at most
# 65,536 (~9 MiB). A fast publisher added tens of thousands between two drains (each
# waited for the interpreter's switch interval, before `YIELD_EVERY`), more or fewer from
# one drain to the next; every full collection walks the spares. The peak is the largest
# drain, less an eighth of it per drain since: a burst's spares outlast the small drains
# that end it (trimmed to twice the last drain, ~10% of a benchmark's publishes built a
# new future, and each new one is young work for the collector), and the room halves
# about every five drains of little after it.
SPARES = 65_536
SPARES_FLOOR = 1_024
# A publisher that finds this many messages (and each multiple of it) waiting for the
# actor releases the GIL for a moment (``time.sleep(0)``). A publish loop otherwise
# holds it until the interpreter's switch interval (5 ms) forces a switch, and each
# thread downstream (the Publisher actor, the topic, the group, the reader of worker
# replies) waits up to that long for its turn: in ``pipeline_pool`` the first hand-over
# reached a worker 19-69 ms into a 174-206 ms round of 100,000 publishes, and each
# worker had nothing in flight for 15-45% of the round. The threads now run while the
# publisher goes on (a yield every 256 or 512 messages did worse than every 1,024).
YIELD_EVERY = 1_024
YIELD_ROWS = YIELD_EVERY * WIDTH
Row = tuple[bytes, dict[str, str], "str | None", "MessageFuture[str]", int, "bool | None"]
Columns = tuple[
    list[bytes], list[dict[str, str]], list["str | None"], list["MessageFuture[str]"], list[int],
    list["bool | None"],
]


class Intake:
    """A hand-off between publishing threads and the Publisher actor, without a lock.

    A publisher adds a message with one ``rows.extend`` of its six items: one C call,
    which no other thread can interleave under the GIL, so the list is always whole
    messages in publish order, and no tuple per message outlives the call (a backlog
    costs the garbage collector little). It tells the actor only when `armed` was clear,
    setting it first; the actor clears `armed` before it takes, so a publisher that
    finds it set knows a drain still to run will take its message. A burst of publishes
    is then one mailbox message, and nothing is left behind.

    Only the actor removes, and only a prefix (`take`): appends made meanwhile stay.

    With no flow-control limits the publisher takes no lock at all: admission cannot
    fail, so the gate counts the message when the actor takes it (`uncounted`). Nor
    does one that pops a credit of the gate (its bytes are counted then). Otherwise,
    with limits, the publisher adds while holding the gate's lock, after admission. One
    list serves all, so order holds whatever the mix.

    The actor's final stop `seal`s the intake; a publisher racing that stop finds the
    seal after its append and fails what is left (see `Publisher`), so every future
    settles even then.
    """

    __slots__ = ("_mark", "_peak", "armed", "rows", "sealed", "since", "spares")

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.armed = False
        self.sealed = False
        # Pending futures that nobody could read any more (`drop_unreachable`), for
        # `publish` to reuse: a publisher pops one, the actor adds them (`spare_room`).
        self.spares: list[MessageFuture[str]] = []
        self._peak = 0  # see SPARES
        # Unused since nothing is guessed from reference counts (`drop_unreachable`).
        self.since = self._mark = None

    def add(self, row: Row) -> bool:
        """Append one message; True when the caller must tell the actor to drain."""
        self.rows.extend(row)
        if self.armed:
            return False
        self.armed = True
        return True

    def spare_room(self, drained: int) -> int:
        """How many spares to keep after a drain of ``drained`` messages (see SPARES);
        trims the rest."""
        self._peak = peak = max(drained, self._peak - (self._peak >> 3))
        room = min(SPARES, 2 * peak + SPARES_FLOOR)
        del self.spares[room:]
        return room

    def take(self) -> Columns:
        """Every message added so far, in order, as columns (gate lock held)."""
        self.armed = False
        # Every future taken now was added after the previous take read its mark: no
        # reader could touch one before that mark, only after it (`drop_unreachable`).
        self.since, self._mark = self._mark, None
        rows = self.rows
        end = len(rows)  # appends made meanwhile land after ``end``, whole: left for later
        columns = _columns(rows, end)
        del rows[:end]
        return columns

    def seal(self) -> Columns:
        """`take`, and mark the intake as no longer read (the actor's final stop)."""
        self.sealed = True
        return self.take()

    def queued(self) -> tuple[int, int]:
        """(messages, bytes) added, not yet taken, and not counted by the gate."""
        rows = self.rows
        end = len(rows)
        return uncounted(rows[4:end:WIDTH], rows[5:end:WIDTH])


def _columns(rows: list[Any], end: int) -> Columns:
    """The columns of ``rows[:end]``, sliced from ``rows`` itself (no copy of it first:
    each copy touches every message's objects twice more, 0.088 µs per message for
    `take` with the copy)."""
    return (rows[0:end:WIDTH], rows[1:end:WIDTH], rows[2:end:WIDTH], rows[3:end:WIDTH],
            rows[4:end:WIDTH], rows[5:end:WIDTH])


def uncounted(sizes: list[int], counted: list[bool | None]) -> tuple[int, int]:
    """(messages, bytes) the gate has not counted: both for a row whose ``counted`` flag
    is False, the bytes for one admitted by a credit (None).

    Most drains hold one kind of flag (False under no limit, credits under a message
    limit), or credits behind the one publish that waited for the window: counting the
    last row's kind, in C, compares by identity (0.3 µs per 1,000 rows); testing each
    kind with ``in`` compared None with False row by row (16-25 µs per 1,000 rows of
    one kind, 40 µs for a window behind a wait; now 4 and 18, `sum` included).
    """
    if not counted:
        return 0, 0
    last = counted[-1]
    alike = counted.count(last)
    if alike == len(counted):
        if last is False:
            return len(sizes), sum(sizes)
        return (0, sum(sizes)) if last is None else (0, 0)
    keep = [flag is not True for flag in counted]
    credited = alike if last is None else counted.count(None)
    return keep.count(True) - credited, sum(compress(sizes, keep))


def reap(intake: Intake, gate: FlowGate, error: Callable[[], BaseException]) -> None:
    """Fail every message in a sealed ``intake`` with ``error()`` and release what the
    gate counted. Each message is taken once: by the actor before the seal, or here by
    one reaping publisher."""
    with gate.lock:
        _, _, _, futures, sizes, counted = intake.take()
        free, free_bytes = uncounted(sizes, counted)  # never counted: nothing to release
        gate.release_locked(len(sizes) - free, sum(sizes) - free_bytes)
    for future in futures:
        fail_future(future, error())
