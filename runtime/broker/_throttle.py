"""Handshake turns per peer host: repeated wrong keys from one host slow down.

A wrong key costs the server one challenge. Without a limit a peer can try keys as fast as
challenges run, which a short text key does not survive. Each host that failed has a
delay that doubles with every consecutive failure (from `FIRST_DELAY` up to `MAX_DELAY`)
and is cleared by a success; its handshakes take turns that far apart, however many
connections it opens at once, so it tries at most one key per delay. Hosts that never
failed never wait. The turns are taken in the connection's own thread: the server's
accept loop, and every other host, never wait for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FIRST_DELAY", "MAX_DELAY", "HandshakeThrottle"]

# The delay after one failure, doubled per further consecutive failure up to MAX_DELAY:
# a mistyped key costs its owner a twentieth of a second, a guessing peer a second per
# try once it failed six times. MAX_DELAY also bounds what a right key from a host that
# just failed waits for its turn.
FIRST_DELAY = 0.05
MAX_DELAY = 1.0
# Hosts remembered at most; past it, those whose last turn is long over are forgotten.
_MAX_HOSTS = 4096


@dataclass(slots=True)
class _Host:
    failures: int = 0
    next_turn: float = 0.0


class HandshakeThrottle:
    """When each peer host may run its next handshake; thread-safe.

    Args:
        first_delay: the delay after a host's first failure, in seconds.
        max_delay: the longest delay, in seconds.
        clock: the time source.
    """

    def __init__(
        self, *, first_delay: float = FIRST_DELAY, max_delay: float = MAX_DELAY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._clock = clock
        self._hosts: dict[str, _Host] = {}
        self._changed = threading.Condition(threading.Lock())
        self._closed = False

    def delay(self, host: str) -> float:
        """The spacing of ``host``'s handshakes now (0.0: it has not failed)."""
        with self._changed:
            record = self._hosts.get(host)
            return 0.0 if record is None else self._spacing(record.failures)

    def wait_turn(self, host: str, deadline: float, cancelled: Callable[[], bool]) -> bool:
        """Block until ``host`` may run a handshake, and take that turn.

        Returns False, without a turn, at once when the turn comes after ``deadline``
        (on the throttle's clock), when ``cancelled()`` turns true (checked whenever
        `wake` is called) or when the throttle is closed.
        """
        with self._changed:
            while True:
                if self._closed or cancelled():
                    return False
                record = self._hosts.get(host)
                if record is None:
                    return True
                now = self._clock()
                if now >= record.next_turn:
                    record.next_turn = now + self._spacing(record.failures)
                    return True
                if record.next_turn > deadline:
                    return False
                self._changed.wait(record.next_turn - now)

    def failed(self, host: str) -> None:
        """``host`` offered a wrong key: its delay doubles (up to the maximum)."""
        with self._changed:
            if host not in self._hosts and len(self._hosts) >= _MAX_HOSTS:
                self._forget_idle()
            record = self._hosts.setdefault(host, _Host())
            record.failures += 1
            record.next_turn = max(record.next_turn, self._clock() + self._spacing(record.failures))

    def succeeded(self, host: str) -> None:
        """``host`` proved the key: it no longer waits."""
        with self._changed:
            if self._hosts.pop(host, None) is not None:
                self._changed.notify_all()

    def wake(self) -> None:
        """Make waiting handshakes check whether they were cancelled."""
        with self._changed:
            self._changed.notify_all()

    def close(self) -> None:
        """Release every waiting handshake (without a turn); later ones get none."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _spacing(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self._max_delay, self._first_delay * 2.0 ** min(failures - 1, 64))

    def _forget_idle(self) -> None:
        """Drop hosts whose last turn is over by the longest delay (lock held)."""
        horizon = self._clock() - self._max_delay
        self._hosts = {host: record for host, record in self._hosts.items()
                       if record.next_turn > horizon}
