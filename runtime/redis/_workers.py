"""``workers=N`` on a Redis topic: N processes, each a consumer of the group that reads,
acks and nacks Redis itself, supervised by the subscribing process."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from typing import Any

import cloudpickle

from runtime.core._settings import TopicSettings
from runtime.errors import BackendUnavailableError
from runtime.redis._connection import Connection
from runtime.redis._consumer import Consumer, consumer_name
from runtime.redis._delivery import RedisDelivery
from runtime.redis._keys import TopicKeys, message_id_of
from runtime.redis._member import MemberLoop
from runtime.redis._partitions import OwnedPartitions, give_back, running_in
from runtime.redis._records import Codec

__all__ = ["Workers"]

logger = logging.getLogger("runtime")

_WATCH = 0.2  # seconds between the supervisor's looks at a stop request
# A worker that dies within `_SHORT_LIFE` seconds of its start is replaced after a delay
# doubling from `_BACKOFF[0]` to `_BACKOFF[1]` (a handler that cannot even load would
# otherwise respawn as fast as the machine forks).
_SHORT_LIFE = 2.0
_READY_TIMEOUT = 30.0  # seconds `Workers.start` waits for its workers to read
_BACKOFF = (0.1, 5.0)


def _start_method() -> str:
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


class _Running:
    """The entry a worker is running (`message_id_of` its partition and entry id), in
    memory the parent can read after a crash."""

    def __init__(self, context: Any) -> None:
        # (milliseconds, sequence, partition); milliseconds 0: none
        self.cells = context.Array("q", 3, lock=False)

    def set(self, delivery: RedisDelivery[Any] | None) -> None:
        """Record ``delivery`` as running (None: nothing runs)."""
        if delivery is None:
            self.cells[0] = 0
            return
        ms, _, seq = delivery.entry_id.partition("-")
        self.cells[1] = int(seq)
        self.cells[2] = delivery.partition
        self.cells[0] = int(ms)

    def get(self) -> str:
        ms, seq, partition = self.cells[0], self.cells[1], self.cells[2]
        return message_id_of(partition, f"{ms}-{seq}") if ms else ""


class _Worker:
    """One worker process and the consumer name it reads under."""

    def __init__(self, process: Any, name: str, running: _Running, pipe: Pipe) -> None:
        self.started = time.monotonic()
        self.process = process
        self.name = name
        self.running = running
        # The parent's end. The worker says "ready" on it once its consumer is made; its
        # closing (a stop, or the parent's death) tells the worker to stop. No lock is
        # shared with the worker: one killed while holding it would hang its parent.
        self.pipe = pipe

    def wait_ready(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the worker's "ready"."""
        with contextlib.suppress(EOFError, OSError):
            if self.pipe.poll(timeout):
                self.pipe.recv_bytes()


class Workers:
    """The worker processes of one ``subscribe(..., workers=N)``.

    A worker that dies is replaced; its deliveries are taken back at once: the one it was
    running settles ``worker_crashed`` (an attempt: redelivered while attempts remain),
    the others go back to the group with no attempt counted.

    Args:
        connection: the bus's connection (workers connect with its options).
        keys: the topic's keys.
        topic: the topic's name.
        group: the group the workers are members of.
        subscriber_id: the subscription's id.
        settings: the topic's settings.
        handler: the handler (cloudpickled to the workers).
        auto_ack: ack on a normal return.
        size: how many workers.
        prefetch: entries a worker reads at once.
        allow: the classes pickled bodies may name.
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, group: str,
                 subscriber_id: int, settings: TopicSettings, handler: Callable[[Any], Any], *,
                 auto_ack: bool, size: int, prefetch: int, allow: tuple[type, ...] = ()) -> None:
        self._connection = connection
        self._keys = keys
        self._topic = topic
        self._group = group
        self._sid = subscriber_id
        self._settings = settings
        self._size = size
        self._codec = Codec(allow)
        self._all_keys = [TopicKeys.of(topic, p) for p in range(settings.partitions)]
        self._spec = cloudpickle.dumps((connection.recipe(), keys, topic, group, subscriber_id,
                                        settings, handler, auto_ack, prefetch, allow))
        self._context: Any = multiprocessing.get_context(_start_method())
        self._stop_supervising = threading.Event()
        self._workers: list[_Worker] = []
        self._quick_deaths = 0
        self._lock = threading.Lock()
        self._supervisor = threading.Thread(target=self._supervise,
                                            name=f"redis-workers-{topic}-{subscriber_id}",
                                            daemon=True)
        self.consumer = self._consumer("")  # the parent's handle on the group (for releases)

    def start(self) -> None:
        """Start the workers and their supervisor; returns once every one reads Redis
        (or `_READY_TIMEOUT` passed: a slow one joins the group when it is up)."""
        with self._lock:
            self._workers = [self._spawn() for _ in range(self._size)]
            workers = list(self._workers)
        deadline = time.monotonic() + _READY_TIMEOUT
        for worker in workers:
            worker.wait_ready(max(deadline - time.monotonic(), 0))
        self._supervisor.start()

    def stop(self, timeout: float) -> None:
        """Stop every worker: each hands back what it holds and exits; one that does not
        within ``timeout`` seconds is killed and its deliveries taken back here."""
        self._stop_supervising.set()
        if self._supervisor.is_alive():
            self._supervisor.join(timeout=timeout)
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.pipe.close()  # the worker's cue to stop
        for worker in workers:
            worker.process.join(timeout=timeout)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=timeout)
                self._take_back(worker, running="")
            elif worker.process.exitcode != 0:
                self._take_back(worker, running=worker.running.get())

    def _spawn(self) -> _Worker:
        name = consumer_name(self._sid)
        running = _Running(self._context)
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main, args=(self._spec, name, running, theirs),
            name=f"actorbus-redis-worker-{self._topic}", daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, name, running, ours)

    def _supervise(self) -> None:
        while not self._stop_supervising.is_set():
            with self._lock:
                sentinels = {w.process.sentinel: w for w in self._workers}
            ready = wait(list(sentinels), timeout=_WATCH)
            if self._stop_supervising.is_set():
                return
            for sentinel in ready:
                self._replace(sentinels[sentinel])

    def _replace(self, dead: _Worker) -> None:
        dead.process.join(timeout=1.0)
        logger.warning("topic %s: worker %s of group %s exited (%s); replacing it",
                       self._topic, dead.process.pid, self._group, dead.process.exitcode)
        self._take_back(dead, running=dead.running.get())
        dead.pipe.close()
        if time.monotonic() - dead.started < _SHORT_LIFE:
            self._quick_deaths += 1
            delay = min(_BACKOFF[0] * 2 ** (self._quick_deaths - 1), _BACKOFF[1])
            if self._stop_supervising.wait(delay):
                return
        else:
            self._quick_deaths = 0
        with self._lock:
            if dead in self._workers and not self._stop_supervising.is_set():
                self._workers[self._workers.index(dead)] = self._spawn()

    def _take_back(self, worker: _Worker, running: str) -> None:
        partitions = self._settings.partitions
        try:
            if partitions == 1:
                held, crashed = self._consumer(worker.name).release(running)
            else:  # every partition it may have owned, then its leases
                held = crashed = 0
                for partition in range(partitions):
                    h, c = self._consumer(worker.name, partition).release(
                        running_in(running, partition))
                    held, crashed = held + h, crashed + c
                give_back(self._connection, self._all_keys, self._group, worker.name)
        except BackendUnavailableError as exc:
            logger.warning("topic %s: could not take back worker %s's deliveries (%s); they "
                           "return after their ack deadline", self._topic, worker.name, exc)
            return
        if held:
            logger.info("topic %s: took back %d deliveries of worker %s (%d running)",
                        self._topic, held, worker.name, crashed)

    def _consumer(self, name: str, partition: int = 0) -> Consumer:
        return Consumer(self._connection, TopicKeys.of(self._topic, partition), self._topic,
                        self._group, self._sid, self._settings, self._codec, batch_acks=False,
                        partition=partition, name=name or None)


def _die_with_parent(parent: Pipe, stopping: threading.Event) -> None:
    """Stop when told or when the parent is gone: Linux kills us when the parent dies
    (PR_SET_PDEATHSIG), and everywhere the parent's end of ``parent`` closing (a stop, or
    its death) sets ``stopping``."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            parent.recv_bytes()
        stopping.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main(spec: bytes, name: str, running: _Running, parent: Pipe) -> None:
    """A worker process: one consumer of the group running the handler until stopped,
    then handing back what it holds."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    (recipe, keys, topic, group, sid, settings, handler, auto_ack, prefetch,
     allow) = cloudpickle.loads(spec)
    local_stop = threading.Event()
    _die_with_parent(parent, local_stop)
    connection = Connection(recipe)
    consumer: Consumer | OwnedPartitions
    if settings.partitions > 1:  # a member that owns partitions, like a thread member
        consumer = OwnedPartitions(connection, topic, group, sid, settings, Codec(allow),
                                   batch_acks=True, name=name)
    else:
        consumer = Consumer(connection, keys, topic, group, sid, settings, Codec(allow),
                            batch_acks=True, name=name)
    with contextlib.suppress(OSError):
        parent.send_bytes(b"ready")

    MemberLoop(consumer, handler, auto_ack=auto_ack, topic=topic, prefetch=prefetch,
               stopping=local_stop, running=running.set).run()
    with contextlib.suppress(BackendUnavailableError):
        consumer.release()
    connection.close()
