"""Flow control under racing publishers: limits hold, nothing is lost, all settles."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime.core._message import Message
from runtime.errors import PublishError
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher


class CountingTopic(FakeTopic):
    """Confirms at once, noting how many messages the Publisher had outstanding each time."""

    def __init__(self) -> None:
        super().__init__()
        self.publisher: Publisher | None = None
        self.seen: list[int] = []

    def _publish_batch(self, messages: list[Message]) -> Future[list[str]]:
        assert self.publisher is not None
        self.seen.append(self.publisher.outstanding[0])
        return super()._publish_batch(messages)


def test_racing_threads_never_exceed_the_message_limit(system: ActorSystem) -> None:
    topic = CountingTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=7),
                    flow_control=FlowControl(max_outstanding_messages=50))
    topic.publisher = pub

    ids = published_ids(pub, threads=4, each=2_000)

    assert len(set(ids)) == len(ids) == 8_000
    assert sum(len(batch) for batch in topic.batches) == 8_000
    assert max(topic.seen) <= 50 and len(topic.seen) >= 8_000 // 50
    assert pub.outstanding == (0, 0)


def published_ids(pub: Publisher, *, threads: int, each: int,
                  before_close: Callable[[], None] = lambda: None) -> list[str]:
    """Publish ``each`` distinct messages from each of ``threads`` threads at once; run
    ``before_close``, close the Publisher, and return every future's id."""
    results: list[list[Future[str]]] = [[] for _ in range(threads)]

    def publish_all(index: int) -> None:
        results[index] = [pub.publish(b"%d-%d" % (index, n)) for n in range(each)]

    workers = [threading.Thread(target=publish_all, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60.0)
    before_close()
    pub.close(timeout=10.0)
    return [future.result(timeout=0) for futures in results for future in futures]


def test_a_publish_racing_close_still_settles(system: ActorSystem) -> None:
    topic = FakeTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=10),
                    flow_control=FlowControl(max_outstanding_messages=100))
    futures: list[Future[str]] = []
    refused = threading.Event()
    started = threading.Event()

    def publish_until_refused() -> None:
        started.set()
        try:
            while True:
                futures.append(pub.publish(b"x"))
        except PublishError:
            refused.set()

    worker = threading.Thread(target=publish_until_refused)
    worker.start()
    assert started.wait(5.0)
    pub.close(timeout=10.0)
    worker.join(timeout=10.0)

    assert refused.is_set() and futures
    outcomes = [future.exception(timeout=5.0) for future in futures]
    confirmed = [f for f, error in zip(futures, outcomes, strict=True) if error is None]
    assert all(isinstance(error, PublishError) for error in outcomes if error is not None)
    assert sum(len(batch) for batch in topic.batches) == len(confirmed)
    assert pub.outstanding == (0, 0)


def test_limits_changing_under_racing_publishers_lose_nothing(system: ActorSystem) -> None:
    topic = FakeTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=5),
                    flow_control=FlowControl(max_outstanding_messages=20))
    done = threading.Event()

    def change_limits() -> None:  # limited, unlimited, bytes-limited, again
        settings = [FlowControl(max_outstanding_messages=7), FlowControl(),
                    FlowControl(max_outstanding_messages=20, max_outstanding_bytes=10_000)]
        turn = 0
        while not done.is_set():
            pub.set_options(flow_control=settings[turn % len(settings)])
            turn += 1

    changer = threading.Thread(target=change_limits)
    changer.start()
    try:
        ids = published_ids(pub, threads=3, each=3_000, before_close=done.set)
    finally:
        done.set()
        changer.join(timeout=10.0)

    assert len(set(ids)) == len(ids) == 9_000
    assert sum(len(batch) for batch in topic.batches) == 9_000
    assert pub.outstanding == (0, 0)
