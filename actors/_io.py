"""One I/O thread per system: reads every process actor's pipe and watches its sentinel."""

from __future__ import annotations

import logging
import os
import threading
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from ._wire import load

if TYPE_CHECKING:
    from ._channel import Channel
    from ._process_cell import ProcessCell

__all__ = ["IOLoop"]

logger = logging.getLogger(__name__)


class IOLoop:
    """Waits on all pipes and sentinels at once; hands frames and deaths to the cells.

    Futures of asks are resolved on this thread, so their callbacks must not block.
    """

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._readers: dict[Any, tuple[ProcessCell, Channel]] = {}
        self._sentinels: dict[int, tuple[ProcessCell, Channel]] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-io", daemon=True)
        self._thread.start()

    def register(self, cell: ProcessCell, channel: Channel) -> None:
        with self._lock:
            self._readers[channel.conn] = (cell, channel)
            self._sentinels[channel.sentinel] = (cell, channel)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _run(self) -> None:
        while not self._stopped:
            with self._lock:
                watched: list[Any] = [*self._readers, *self._sentinels, self._wake_r]
            for ready in wait(watched):
                if ready == self._wake_r:
                    os.read(self._wake_r, 4096)
                elif ready in self._readers:
                    self._read(*self._readers[ready])
                elif ready in self._sentinels:
                    self._reap(*self._sentinels[ready])
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _read(self, cell: ProcessCell, channel: Channel) -> bool:
        try:
            data = channel.conn.recv_bytes()
        except (EOFError, OSError):
            with self._lock:  # nothing more to read; the sentinel reports the death
                self._readers.pop(channel.conn, None)
            return False
        try:
            cell.on_frame(channel, load(data))
        except Exception:
            logger.exception("bad frame from process actor %s", cell.name)
        return True

    def _reap(self, cell: ProcessCell, channel: Channel) -> None:
        if channel.conn in self._readers:
            while self._poll(channel) and self._read(cell, channel):
                pass
        with self._lock:
            self._readers.pop(channel.conn, None)
            self._sentinels.pop(channel.sentinel, None)
        channel.process.join(1.0)
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
        except (EOFError, OSError):
            return False

    def stop(self, timeout: float | None = 1.0) -> None:
        self._stopped = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
