"""availableNow against a real loopback broker: a run ends only when nothing waits for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.spark import authkey, options

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from runtime import Bus, Message  # noqa: E402
from runtime.broker._server import BusServer, serve  # noqa: E402
from runtime.spark._options import SourceOptions  # noqa: E402
from runtime.spark._source import ActorbusStreamReader  # noqa: E402

_COUNT = 20_000
_BATCH = 8_192  # the broker's lease member prefetch: the group refills it after each take


@pytest.fixture
def server() -> Iterator[tuple[Bus, BusServer]]:
    with Bus() as bus, serve(bus, authkey=authkey()) as server:
        yield bus, server


class _Watched(ActorbusStreamReader):
    """The real reader; it signals once it asks the broker a second time what waits."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.targets = 0
        self.asked_again = threading.Event()

    def _call(self, operation: str, *args: Any) -> Any:
        if operation == "lease_target":
            self.targets += 1
            if self.targets == 2:
                self.asked_again.set()
        return super()._call(operation, *args)


def test_a_run_waits_for_messages_its_group_has_not_handed_over_yet(
    server: tuple[Bus, BusServer],
) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    bus, broker = server
    topic = bus.create_topic("t", ack_timeout=None, balanced_capacity=_COUNT + 1)
    topic.create_group("spark")
    topic._publish_batch([Message(data=b"m%d" % i) for i in range(_COUNT)]).result(timeout=30)
    reader = _Watched(SourceOptions.parse(options(
        broker.address, topic="t", group="spark", max_messages_per_batch=_BATCH)),
        StructType([]))
    gate = topic._subscribers.handles[0].gate
    ends: list[int] = []
    third = threading.Thread(target=lambda: ends.append(
        reader.latestOffset(second, ReadAllAvailable())["offset"]))
    try:
        reader.prepareForTriggerAvailableNow()
        first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        member = broker.service._leases[("t", "spark", "spark")]._source._source
        with member._changed:  # the group refills its member after each take
            assert member._changed.wait_for(lambda: member._items, timeout=30)
        with gate._changed:  # from here the group can hand its member nothing more
            second = reader.latestOffset(first, ReadAllAvailable())  # takes the refill
            third.start()  # finds nothing handed over, while 3,616 wait in the group
            asked_again = reader.asked_again.wait(10)
        third.join(60)
        last = reader.latestOffset({**second, "offset": ends[0]}, ReadAllAvailable())
    finally:
        reader.stop()

    assert (first["offset"], second["offset"]) == (_BATCH, 2 * _BATCH)
    assert asked_again and not third.is_alive()
    assert ends == [_COUNT]  # an end of 2 * _BATCH would have ended the run there
    assert last["offset"] == _COUNT  # nothing more waits: the run ends
    assert topic.join(timeout=10)  # the tracker counts the last ack's settlements after it returned
    assert topic.stats().delivered == _COUNT  # each batch acked when the next was asked


def test_a_caught_up_run_ends_at_once_while_another_group_holds_the_messages(
    server: tuple[Bus, BusServer],
) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    bus, broker = server
    topic = bus.create_topic("t", ack_timeout=None)
    topic.create_group("spark")
    topic.create_group("other")  # nobody reads it: the topic's messages stay pending
    topic._publish_batch([Message(data=b"m%d" % i) for i in range(100)]).result(timeout=30)
    runs = [_Watched(SourceOptions.parse(options(broker.address, topic="t", group="spark")),
                     StructType([])) for _ in range(2)]
    try:
        for run in runs:
            run.prepareForTriggerAvailableNow()
        leased = runs[0].latestOffset(runs[0].initialOffset(), ReadAllAvailable())
        done = runs[0].latestOffset(leased, ReadAllAvailable())  # acks the batch; ends
        start = runs[1].initialOffset()
        again = runs[1].latestOffset(start, ReadAllAvailable())
        lag = runs[1].reportLatestOffset()
    finally:
        for run in runs:
            run.stop()

    assert (leased["offset"], done["offset"], start["offset"]) == (100, 100, 100)
    assert (again["offset"], lag["offset"]) == (100, 100)  # nothing waits for "spark"
    assert runs[1].targets == 2  # its target, and the lag: no wait for other groups' mail
    assert topic.stats().pending == 100
