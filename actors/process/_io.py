"""One I/O thread per system reads every process actor's pipe and watches its sentinel;
one writer thread sends the bursts of mail that senders leave queued."""

from __future__ import annotations

import logging
import os
import selectors
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from actors.process._wire import load

if TYPE_CHECKING:
    from actors.process._cell import ProcessCell
    from actors.process._channel import Channel

__all__ = ["IOLoop"]

logger = logging.getLogger(__name__)

_READ, _DIED = "read", "died"


class IOLoop:
    """Waits on all pipes and sentinels at once; hands frames and deaths to the cells.

    The selector is only touched on this thread (registrations are queued and applied
    here), so it needs no lock. Futures of asks are resolved on this thread: their
    callbacks must not block.
    """

    def __init__(self, name: str) -> None:
        self._selector = selectors.DefaultSelector()
        self._incoming: deque[tuple[ProcessCell, Channel]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopped = False
        self.writer = _Writer(name)
        self._thread = threading.Thread(target=self._run, name=f"{name}-io", daemon=True)
        self._thread.start()

    def register(self, cell: ProcessCell, channel: Channel) -> None:
        """Start watching a new process's pipe and sentinel."""
        self._incoming.append((cell, channel))
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _run(self) -> None:
        try:
            while not self._stopped:
                for key, _ in self._selector.select():
                    if key.data is None:
                        os.read(self._wake_r, 4096)
                        self._adopt()
                        continue
                    kind, cell, channel = key.data
                    if channel.reaped:  # its read and its death came in one batch
                        continue
                    if kind == _READ:
                        self._read(cell, channel)
                    else:
                        self._reap(cell, channel)
        finally:
            self._selector.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _adopt(self) -> None:
        while self._incoming:
            cell, channel = self._incoming.popleft()
            self._selector.register(channel.conn, selectors.EVENT_READ, (_READ, cell, channel))
            self._selector.register(channel.sentinel, selectors.EVENT_READ, (_DIED, cell, channel))

    def _forget(self, fileobj: Any) -> None:
        try:
            self._selector.unregister(fileobj)
        except (KeyError, ValueError, OSError):
            pass

    def _read(self, cell: ProcessCell, channel: Channel) -> bool:
        try:
            data = channel.conn.recv_bytes()
        except (EOFError, OSError):
            self._forget(channel.conn)  # nothing more to read; the sentinel reports the death
            return False
        try:
            cell.on_frame(channel, load(data))
        except Exception:
            logger.exception("bad frame from process actor %s", cell.name)
        return True

    def _reap(self, cell: ProcessCell, channel: Channel) -> None:
        while self._poll(channel) and self._read(cell, channel):
            pass  # what the process wrote before it died still counts
        self._forget(channel.conn)
        self._forget(channel.sentinel)
        channel.reaped = True
        channel.process.join(1.0)
        channel.kill_group()  # what its handlers started dies with it
        try:
            channel.conn.close()
        except OSError:
            pass
        try:
            cell.process_exited(channel, channel.process.exitcode)
        except Exception:
            logger.exception("handling the exit of process actor %s failed", cell.name)

    @staticmethod
    def _poll(channel: Channel) -> bool:
        try:
            return channel.conn.poll(0)
        except (EOFError, OSError, ValueError):
            return False

    def stop(self, timeout: float | None = 1.0) -> None:
        """Stop both threads (what is still unsent is dropped: the processes are gone)."""
        self._stopped = True
        self._wake()
        self.writer.stop(timeout)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


class _Writer:
    """Sends queued mail for channels whose senders did not send it themselves.

    A sender that finds its channel busy (a burst) only queues; this thread then sends
    everything queued in one frame, so a single busy sender still gets batched frames.
    """

    def __init__(self, name: str) -> None:
        self._due: deque[Channel] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-writer", daemon=True)
        self._thread.start()

    def schedule(self, channel: Channel) -> None:
        with self._cond:
            if not channel.scheduled:
                channel.scheduled = True
                self._due.append(channel)
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                channel = self._due.popleft()
                channel.scheduled = False
            channel.flush()

    def stop(self, timeout: float | None) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
