"""Topic.publish: the guard chain (runtime/core/_publishing.py), throttle, backpressure and outcomes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager

import pytest
from support.reliability import wait_until

from runtime import Bus, Delivery, Nack, Outcome, PublishReport, Topic
from runtime.core._publishing import PartlyPublished
from runtime.core._topic_actor import batch_ids
from runtime.errors import MessageTypeError, TopicClosedError, WouldBlock


class Order:
    def __init__(self, number: int) -> None:
        self.number = number


class RushOrder(Order):
    pass


@contextmanager
def _publishing(topic: Topic[str], message: str) -> Iterator[Future[PublishReport]]:
    """``topic.publish(message)`` running in another thread (started when this yields)."""
    started = threading.Event()

    def publish() -> PublishReport:
        started.set()
        return topic.publish(message)

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(publish)
        assert started.wait(5)
        yield future


def test_closed_guard_comes_before_the_type_check(bus: Bus) -> None:
    topic = bus.create_topic("orders", message_type=Order)
    topic.close()

    with pytest.raises(TopicClosedError):
        topic.publish("not an order")

    assert topic.stats().published == 0


def test_type_check_uses_isinstance_so_subclasses_pass(bus: Bus) -> None:
    topic = bus.create_topic("orders", message_type=Order)
    topic.subscribe(lambda d: d.ack(), group="g")

    topic.publish(RushOrder(1)).outcome.result(timeout=5)
    with pytest.raises(MessageTypeError) as info:
        topic.publish("nope")

    assert isinstance(info.value, TypeError)
    assert "Order" in str(info.value) and "str" in str(info.value)
    stats = topic.stats()
    assert (stats.published, stats.delivered) == (1, 1)


def test_no_destinations_dead_letters_with_subscriber_minus_one(bus: Bus) -> None:
    topic = bus.create_topic("orders")

    report = topic.publish("lost")

    assert report.balanced == {} and report.broadcast == 0
    assert report.outcome.result(timeout=5) == Outcome(
        acked=False, nacks=(Nack("none", "no_subscribers"),)
    )
    [letter] = list(topic.dead_letters)
    assert (letter.message, letter.subscriber_id, letter.reason) == ("lost", -1, "no_subscribers")
    stats = topic.stats()
    assert (stats.published, stats.nacked, stats.dead_lettered, stats.pending) == (1, 1, 1, 0)


def test_report_is_an_enqueue_time_snapshot(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    topic.create_group("billing")
    topic.create_group("shipping")
    audit = topic.subscription()
    topic.subscription()

    report = topic.publish("o-1", key="c-7", attributes={"a": "1"})

    assert isinstance(report, PublishReport)
    assert report.balanced == {"billing": "enqueued", "shipping": "enqueued"}
    assert report.broadcast == 2
    assert not report.outcome.done()
    delivery = audit.receive(timeout=5)
    assert (delivery.message, delivery.key, delivery.attributes) == ("o-1", "c-7", {"a": "1"})
    assert delivery.message_id == report.message_id


def test_message_ids_are_unique_and_increasing(bus: Bus) -> None:
    topic = bus.create_topic("orders")

    ids = [topic.publish(n).message_id for n in range(50)]

    assert len(set(ids)) == 50
    assert [int(i) for i in ids] == sorted(int(i) for i in ids)


def test_outcome_is_acked_only_when_every_destination_acked(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    topic.subscribe(lambda d: d.ack(), group="billing")
    topic.subscribe(lambda d: d.nack("out of stock"), group="shipping")
    topic.subscribe(lambda d: d.ack())
    third = topic.subscribe(lambda d: d.nack())

    report = topic.publish("o-1")
    outcome = report.outcome.result(timeout=5)

    assert not outcome.acked
    assert sorted(outcome.nacks, key=lambda n: n.destination) == [
        Nack("group:shipping", "nack", "out of stock"),
        Nack(f"subscriber:{third.id}", "nack", None),
    ]
    stats = topic.stats()
    assert (stats.delivered, stats.nacked, stats.dead_lettered, stats.pending) == (0, 2, 2, 0)


def test_delivered_counts_fully_acked_messages_once(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    for group in ("a", "b"):
        topic.subscribe(lambda d: d.ack(), group=group)
    topic.subscribe(lambda d: d.ack())

    outcomes = [topic.publish(n).outcome for n in range(20)]

    assert all(f.result(timeout=5).acked for f in outcomes)
    assert topic.join(timeout=5)
    assert topic.stats().delivered == 20


def test_throttle_delays_follow_the_free_slot_ratio() -> None:
    slept: list[float] = []
    with Bus(sleep=slept.append) as bus:
        topic = bus.create_topic("orders", max_pending=10, throttle=0.5, ack_timeout=None)
        topic.create_group("held")  # no members: every message stays pending

        for n in range(10):
            topic.publish(n)
        with pytest.raises(WouldBlock):
            topic.publish(10, timeout=0.05)

        assert [round(s, 3) for s in slept] == [0.2, 0.25, 0.333, 0.5, 1.0]
        stats = topic.stats()
        assert (stats.throttled, stats.pending) == (5, 10)


def test_backpressure_counts_messages_not_deliveries(bus: Bus) -> None:
    topic = bus.create_topic("orders", max_pending=1, ack_timeout=None)
    readers = [topic.subscription() for _ in range(3)]
    topic.publish("first")
    deliveries = [r.receive(timeout=5) for r in readers]

    deliveries[0].ack()
    deliveries[1].nack()
    with pytest.raises(WouldBlock):
        topic.publish("second", timeout=0.05)
    deliveries[2].ack()
    report = topic.publish("second", timeout=5)

    assert report.broadcast == 3
    assert topic.stats().pending == 1


def test_backpressure_slot_frees_on_timeout_too() -> None:
    with Bus() as bus:
        topic = bus.create_topic("orders", max_pending=1, ack_timeout=0.05)
        reader = topic.subscription()
        topic.publish("first")
        delivery = reader.receive(timeout=5)

        report = topic.publish("second", timeout=5)

        assert delivery.timed_out
        assert report.broadcast == 1


def test_blocked_publisher_wakes_when_a_slot_frees(bus: Bus) -> None:
    topic = bus.create_topic("orders", max_pending=1, ack_timeout=None)
    reader = topic.subscription(group="g")
    topic.publish("first")
    started = threading.Event()

    def publish_second() -> PublishReport:
        started.set()
        return topic.publish("second", timeout=10)

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(publish_second)
        started.wait(5)
        reader.receive(timeout=5).ack()
        report = future.result(timeout=10)

    assert report.balanced == {"g": "enqueued"}
    assert reader.receive(timeout=5).message == "second"


def test_closing_wakes_a_blocked_publisher_with_topic_closed(bus: Bus) -> None:
    topic = bus.create_topic("orders", max_pending=1, ack_timeout=None)
    topic.create_group("held")
    topic.publish("first")

    with _publishing(topic, "second") as future:
        assert not future.done()
        topic.close()

        with pytest.raises(TopicClosedError):
            future.result(timeout=10)


def test_a_batch_blocked_midway_on_max_pending_keeps_its_accepted_part_when_closed(
    bus: Bus,
) -> None:
    topic = bus.create_topic("orders", max_pending=3, ack_timeout=None)
    topic.create_group("held")  # no member: what enters stays pending
    batch = batch_ids(topic._publish_batches([([b"%d" % n for n in range(5)], [{}] * 5, [None] * 5)]))
    assert wait_until(lambda: topic.stats().pending == 3, 10.0)
    assert not batch.done()  # the other two wait for a slot

    topic.close()

    partial = batch.exception(timeout=10)
    assert isinstance(partial, PartlyPublished)
    assert partial.ids == ["1", "2", "3"] and isinstance(partial.error, TopicClosedError)
    assert [letter.message_id for letter in topic.dead_letters] == ["1", "2", "3"]


def test_delivery_carries_the_object_itself(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    order = Order(7)
    seen: list[Delivery[Order]] = []
    done = threading.Event()

    def handler(delivery: Delivery[Order]) -> None:
        seen.append(delivery)
        delivery.ack()
        done.set()

    topic.subscribe(handler, group="g")
    topic.publish(order, key="")
    done.wait(5)

    assert seen[0].message is order
    assert seen[0].key is None
    assert seen[0].attributes == {}
    assert (seen[0].topic, seen[0].group, seen[0].attempt) == ("orders", "g", 1)


def test_an_outcome_future_is_not_cancellable_and_serves_callbacks_and_as_completed() -> None:
    done: list[Outcome] = []
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(lambda d: d.ack(), group="g")

        reports = [topic.publish(n) for n in range(3)]
        cancelled = reports[0].outcome.cancel()
        reports[1].outcome.add_done_callback(lambda f: done.append(f.result()))
        finished = list(as_completed([r.outcome for r in reports], timeout=10))

    assert cancelled is False
    assert len(finished) == 3 and all(f.result().acked for f in finished)
    assert done == [Outcome(acked=True, nacks=())]


def test_a_publish_refused_by_a_full_group_never_counts_as_published(bus: Bus) -> None:
    topic = bus.create_topic("orders", balanced_capacity=1, ack_timeout=None)
    topic.create_group("held")  # no member: the first message fills the group
    topic.publish("first")
    with pytest.raises(WouldBlock):
        topic.publish("second", timeout=0.05)
    assert (topic.stats().published, topic.stats().pending) == (1, 1)

    with _publishing(topic, "third") as future:
        gate = topic._subscribers.handles[0].gate
        assert wait_until(lambda: gate._waiting == 1, 10.0)
        assert topic.stats().published == 1  # waiting for room: not in the topic yet
        topic.close()
        with pytest.raises(TopicClosedError):
            future.result(timeout=10)

    stats = topic.stats()
    assert (stats.published, stats.pending) == (1, 0)
    assert [(d.message, d.reason) for d in topic.dead_letters] == [("first", "closed")]


def test_lone_publishes_reach_a_broadcast_subscriber_from_when_it_joins(bus: Bus) -> None:
    topic = bus.create_topic("orders", ack_timeout=None)
    group = topic.subscription(group="g")
    before = topic.publish("before")
    reader = topic.subscription()
    after = topic.publish("after")

    assert (before.broadcast, after.broadcast) == (0, 1)
    assert before.balanced == after.balanced == {"g": "enqueued"}
    assert reader.receive(timeout=5).message == "after"
    assert [group.receive(timeout=5).message for _ in range(2)] == ["before", "after"]
    assert topic.stats().published == 2


@pytest.mark.parametrize("attributes", [["x"], {"n": 1}, {1: "v"}, "k=v", {"k": None}])
def test_publish_refuses_attributes_that_are_not_str_to_str_and_leaves_nothing_behind(
    bus: Bus, attributes: object,
) -> None:
    topic = bus.create_topic("orders", max_pending=1)
    topic.subscribe(lambda delivery: delivery.ack(), group="billing")

    with pytest.raises(TypeError, match="attributes"):
        topic.publish("order", attributes=attributes)  # type: ignore[arg-type]

    assert topic.stats().published == 0
    assert topic.stats().pending == 0
    assert topic.join(timeout=5.0)
    outcome = topic.publish("next", attributes={"k": "v"}, timeout=5.0).outcome.result(5.0)
    assert outcome.acked  # the one max_pending slot was left free
    assert topic.stats().published == 1


def test_publish_refuses_bad_attributes_on_every_path(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    topic.subscription()  # a broadcast reader: not the lone-message path

    with pytest.raises(TypeError):
        topic.publish("order", attributes={"n": 1})  # type: ignore[dict-item]

    assert topic.stats().published == 0
    assert topic.stats().pending == 0


def test_published_attributes_are_a_copy_of_the_callers(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    seen: list[dict[str, str]] = []
    done = threading.Event()

    def handle(delivery: Delivery[str]) -> None:
        seen.append(dict(delivery.attributes))
        delivery.ack()
        done.set()

    topic.subscribe(handle, group="billing")
    attributes = {"k": "v"}

    topic.publish("order", attributes=attributes)
    attributes["k"] = "changed"

    assert done.wait(5.0)
    assert seen == [{"k": "v"}]


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_timeouts_are_refused_before_anything_is_sent(bus: Bus, timeout: float) -> None:
    topic = bus.create_topic("orders", max_pending=1)
    topic.subscribe(lambda delivery: delivery.ack(), group="billing")

    with pytest.raises(ValueError, match="timeout"):
        topic.publish("order", timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        topic.join(timeout=timeout)

    assert topic.stats().published == 0
    assert topic.stats().pending == 0


def test_a_publish_waiting_for_room_counts_as_published_only_once_it_enters(bus: Bus) -> None:
    topic = bus.create_topic("orders", max_pending=1)
    release = threading.Event()

    def hold(delivery: Delivery[str]) -> None:
        release.wait(10)
        delivery.ack()

    topic.subscribe(hold, group="billing")
    topic.publish("first")

    with _publishing(topic, "second") as second:
        wait_until(lambda: topic.held_by() is not None, 5.0)
        waiting = topic.stats().published
        release.set()
        second.result(5.0)

    assert waiting == 1
    assert topic.join(timeout=5.0)
    assert topic.stats().published == 2
    assert topic.stats().delivered == 2


def test_topics_feeding_each_other_raise_a_bounded_wait_that_names_the_cycle() -> None:
    errors: list[WouldBlock] = []
    raised = threading.Event()

    def forward(target: Topic[str]) -> Callable[[Delivery[str]], None]:
        def handle(delivery: Delivery[str]) -> None:
            try:
                for _ in range(3):
                    target.publish("x")  # no timeout: a cycle would wait forever
            except WouldBlock as exc:
                errors.append(exc)
                raised.set()
                raise
            delivery.ack()
        return handle

    with Bus() as bus:
        a = bus.create_topic("a", balanced_capacity=1, ack_timeout=0.5)
        b = bus.create_topic("b", balanced_capacity=1, ack_timeout=0.5)
        a.subscribe(forward(b), group="g", prefetch=1)
        b.subscribe(forward(a), group="g", prefetch=1)
        with contextlib.suppress(WouldBlock):
            for _ in range(4):
                a.publish("seed", timeout=2.0)

        assert raised.wait(20.0)  # before: both handlers waited for good

    text = str(errors[0])
    assert "a handler of topic" in text and "cycle" in text
    assert {"'a'", "'b'"} <= {word.strip(":,()") for word in text.split()}


def test_a_handler_publishing_into_its_own_full_topic_gets_a_bounded_wait() -> None:
    errors: list[WouldBlock] = []
    raised = threading.Event()

    with Bus() as bus:
        # max_pending: the slot the handler waits for frees only when it returns.
        topic = bus.create_topic("loop", max_pending=1, ack_timeout=0.5)

        def handle(delivery: Delivery[str]) -> None:
            try:
                for _ in range(3):
                    topic.publish("again")
            except WouldBlock as exc:
                errors.append(exc)
                raised.set()

        topic.subscribe(handle, group="g", prefetch=1)
        topic.publish("first", timeout=2.0)

        assert raised.wait(20.0)

    assert "a handler of topic 'loop' waited 0.5 s to publish into its own topic" in str(errors[0])
