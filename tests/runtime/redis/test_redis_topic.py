"""What only a Redis topic does: durability across handles, declare semantics, fencing,
deadlines measured by Redis, hand-back on close, typed failures."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
import threading
from typing import Any

import pytest
import redis

from runtime import Bus, Message, Nack
from runtime.errors import (
    BackendUnavailableError,
    InvalidSettingsError,
    SettlementError,
    TopicClosedError,
    UnsupportedPolicyError,
    WouldBlock,
)
from runtime.redis._connection import Connection
from runtime.redis._consumer import Consumer
from runtime.redis._keys import TopicKeys
from runtime.redis._member import READ_WORK, MemberLoop, read_count, run_handler
from runtime.redis._records import Codec


def test_messages_waiting_in_a_group_survive_the_bus_that_published_them(
        redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as first:
        topic = first.create_topic(topic_name, backend="redis")
        topic.create_group("g")
        ids = [topic.publish(Message(data=f"m{i}".encode())).message_id for i in range(3)]

    with Bus(redis=redis_url) as second:
        topic = second.create_topic(topic_name, backend="redis")
        pull = topic.subscription(group="g")
        received = [pull.receive(timeout=10) for _ in range(3)]
        for delivery in received:
            delivery.ack()

        assert [d.message_id for d in received] == ids
        assert [d.message.data for d in received] == [b"m0", b"m1", b"m2"]
        assert topic.join(timeout=10) is True
        topic.destroy()


def test_create_topic_attaches_when_settings_match_and_names_the_first_that_differs(
        redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as first, Bus(redis=redis_url) as second:
        first.create_topic(topic_name, backend="redis", ack_timeout=10.0, max_pending=5)

        attached = second.create_topic(topic_name, backend="redis", ack_timeout=10.0,
                                       max_pending=5)
        with Bus(redis=redis_url) as third, pytest.raises(InvalidSettingsError) as info:
            third.create_topic(topic_name, backend="redis", ack_timeout=3.0, max_pending=6)

        assert attached.settings.ack_timeout == 10.0
        assert info.value.setting == "ack_timeout"
        attached.destroy()


def test_late_ack_after_redis_took_the_delivery_back_raises(redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", ack_timeout=0.2,
                                   max_delivery_attempts=2)
    slow = topic.subscription(group="g")
    fast = topic.subscription(group="g")
    report = topic.publish("once")
    first = slow.receive(timeout=10)

    second = fast.receive(timeout=10)  # after the deadline, Redis hands it to the other
    with pytest.raises(SettlementError):
        first.ack()
    second.ack()

    assert (first.attempt, second.attempt) == (1, 2)
    assert first.timed_out is True
    assert report.outcome.result(timeout=10).acked is True
    stats = topic.stats()
    assert (stats.timed_out, stats.redelivered, stats.delivered) == (1, 1, 1)
    topic.destroy()


def test_expired_last_attempt_is_dead_lettered_timeout(redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", ack_timeout=0.2)
    holder = topic.subscription(group="g")
    other = topic.subscription(group="g")
    report = topic.publish("never acked")
    held = holder.receive(timeout=10)

    with pytest.raises(TimeoutError):
        other.receive(timeout=0.6)  # its reads reclaim the expired delivery: dead, not given

    outcome = report.outcome.result(timeout=10)
    [letter] = list(topic.dead_letters)
    assert (letter.reason, letter.attempts, letter.message) == ("timeout", 1, "never acked")
    assert letter.subscriber_id == held.subscriber_id
    assert outcome.nacks[0].reason == "timeout"
    with pytest.raises(SettlementError):
        held.ack()
    assert topic.stats().timed_out == 1
    topic.destroy()


def test_close_hands_unsettled_deliveries_back_with_no_attempt_counted(
        redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as first:
        topic = first.create_topic(topic_name, backend="redis", ack_timeout=30.0)
        pull = topic.subscription(group="g", prefetch=3)
        for i in range(3):
            topic.publish(i)
        taken = pull.receive(timeout=10)
    with pytest.raises(SettlementError):
        taken.ack()

    with Bus(redis=redis_url) as second:
        topic = second.create_topic(topic_name, backend="redis", ack_timeout=30.0)
        pull = topic.subscription(group="g")
        again = [pull.receive(timeout=10) for _ in range(3)]
        for delivery in again:
            delivery.ack()

        assert sorted(d.message for d in again) == [0, 1, 2]
        assert [d.attempt for d in again] == [1, 1, 1]
        assert topic.join(timeout=10) is True
        assert topic.stats().dead_lettered == 0
        topic.destroy()


def test_closed_handle_refuses_publish_but_the_topic_lives_on(redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis")
        topic.create_group("g")
        topic.publish("kept")
        bus.remove_topic(topic_name)

        with pytest.raises(TopicClosedError):
            topic.publish("refused")
        again = bus.create_topic(topic_name, backend="redis")
        assert again.stats().pending == 1
        again.destroy()
        assert redis.Redis.from_url(redis_url).exists(*TopicKeys.of(topic_name).all()) == 0


def test_max_pending_holds_publishers_until_a_slot_frees(redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", max_pending=2)
    topic.create_group("g")
    topic.publish(1)
    topic.publish(2)

    with pytest.raises(WouldBlock):
        topic.publish(3, timeout=0.2)
    pull = topic.subscription(group="g")
    pull.receive(timeout=10).ack()
    report = topic.publish(3, timeout=10)

    assert report.message_id
    assert topic.held_by() is not None
    assert topic.stats().pending == 2
    topic.destroy()


def test_held_by_names_max_pending_reached_by_a_broadcast_reader_alone(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", max_pending=2)
    reader = topic.subscription()  # a broadcast reader, no group
    topic.publish(1)
    topic.publish(2)

    with pytest.raises(WouldBlock):
        topic.publish(3, timeout=0.2)
    assert topic.held_by() == f"topic {topic_name!r}: max_pending (2/2)"
    reader.receive(timeout=10).ack()
    assert topic.held_by() is None
    reader.unsubscribe()
    topic.destroy()


def test_undecodable_body_is_dead_lettered_error_and_nothing_runs(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis")
    topic.create_group("g")
    evil = pickle.dumps(subprocess.Popen)  # names a class no allow-list has
    client = redis.Redis.from_url(redis_bus._redis)
    stream = TopicKeys.of(topic_name).stream
    client.xadd(stream, {"b": evil, "f": "p", "k": "", "a": ""})
    client.hincrby(TopicKeys.of(topic_name).stats, "pending", 1)
    topic.publish("fine")
    pull = topic.subscription(group="g")

    delivery = pull.receive(timeout=10)
    delivery.ack()

    assert delivery.message == "fine"
    [letter] = list(topic.dead_letters)
    assert letter.reason == "error"
    assert "subprocess.Popen" in (letter.error or "")
    assert topic.join(timeout=10) is True
    topic.destroy()


def test_allow_lets_a_plain_class_cross(redis_url: str, topic_name: str) -> None:
    from support.redis_types import Order

    with Bus(redis=redis_url, allow=(Order,)) as bus:
        topic = bus.create_topic(topic_name, backend="redis")
        pull = topic.subscription(group="g")
        topic.publish(Order(sku="a", quantity=2))

        delivery = pull.receive(timeout=10)
        delivery.ack()

        assert delivery.message == Order(sku="a", quantity=2)
        topic.destroy()


@pytest.mark.parametrize(("setting", "value"), [
    ("balanced_on_full", "drop_newest"), ("broadcast_on_lag", "drop_oldest"),
    ("broadcast_on_lag", "disconnect"),
])
def test_policies_redis_cannot_honour_are_refused(redis_bus: Bus, topic_name: str,
                                                   setting: str, value: str) -> None:
    with pytest.raises(UnsupportedPolicyError) as info:
        redis_bus.create_topic(topic_name, backend="redis", **{setting: value})

    assert setting in str(info.value)
    assert value in str(info.value)


def test_redis_topic_needs_a_connection() -> None:
    with Bus() as bus, pytest.raises(InvalidSettingsError) as info:
        bus.create_topic("orders", backend="redis")

    assert info.value.setting == "redis"


def test_a_redis_that_is_down_is_a_typed_error_naming_its_url() -> None:
    with (socket_port() as port, Bus(redis=f"redis://127.0.0.1:{port}/0") as bus,
          pytest.raises(BackendUnavailableError) as info):
        bus.create_topic("orders", backend="redis")

    assert f"127.0.0.1:{port}" in str(info.value)
    assert isinstance(info.value, ConnectionError)


def test_thread_members_in_one_group_share_the_work_without_duplicates(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis")
    seen: dict[int, list[Any]] = {1: [], 2: []}
    lock = threading.Lock()

    def member(number: int) -> Any:
        def handle(delivery: Any) -> None:
            with lock:
                seen[number].append(delivery.message)
            delivery.ack()
        return handle

    topic.subscribe(member(1), group="g", prefetch=4)
    topic.subscribe(member(2), group="g", prefetch=4)

    for i in range(400):
        topic.publish(i)

    assert topic.join(timeout=20) is True
    assert sorted(seen[1] + seen[2]) == list(range(400))
    assert topic.stats().delivered == 400
    topic.destroy()


def test_import_runtime_does_not_import_redis() -> None:
    code = "import sys, runtime; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.split() == ["False"]


class socket_port:
    """A loopback port nothing listens on, for the test's duration."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return int(self._socket.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._socket.close()


def test_entries_every_group_settled_are_trimmed_from_the_stream(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis")
    topic.subscribe(lambda d: d.ack(), group="a")
    topic.subscribe(lambda d: d.ack(), group="b")
    publisher = topic.publisher()
    for i in range(3000):
        publisher.publish(f"{i}".encode())
    publisher.flush(timeout=10)
    assert topic.join(timeout=20) is True
    client = redis.Redis.from_url(redis_bus._redis)
    stream = TopicKeys.of(topic_name).stream

    topic.publish(b"one more")  # members trim on their next reads
    assert topic.join(timeout=10) is True
    trimmed = _eventually(lambda: client.xlen(stream) < 1000)

    assert trimmed
    assert topic.stats().delivered == 3001
    topic.destroy()


def test_deleting_a_group_completes_what_waits_in_it_as_unsubscribed(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis")
    topic.create_group("gone")
    topic.subscribe(lambda d: d.ack(), group="stays")
    report = topic.publish("x")

    topic.delete_group("gone")

    outcome = report.outcome.result(timeout=10)
    assert outcome.nacks[0].destination == "group:gone"
    assert outcome.nacks[0].reason == "unsubscribed"
    assert topic.groups() == ["stays"]
    assert topic.join(timeout=10) is True
    topic.destroy()


def test_dead_letter_callback_sees_letters_written_by_any_process(
        redis_url: str, topic_name: str) -> None:
    seen: list[Any] = []
    arrived = threading.Event()
    with Bus(redis=redis_url) as watching, Bus(redis=redis_url) as failing:
        watched = watching.create_topic(topic_name, backend="redis")
        watched.dead_letters.on_dead_letter(lambda letter: (seen.append(letter), arrived.set()))
        other = failing.create_topic(topic_name, backend="redis")
        other.subscribe(lambda d: d.nack("no"), group="g")

        other.publish("refused")

        assert arrived.wait(timeout=10)
        assert [(s.message, s.reason, s.error) for s in seen] == [("refused", "nack", "no")]
        other.destroy()


def test_publish_to_a_redis_that_went_down_raises_naming_its_url(durable_redis: Any,
                                                                 topic_name: str) -> None:
    import time

    with Bus(redis=durable_redis.url) as bus:
        topic = bus.create_topic(topic_name, backend="redis")
        topic.create_group("g")
        topic.publish("kept")
        durable_redis.kill()
        started = time.monotonic()

        with pytest.raises(BackendUnavailableError) as info:
            topic.publish("refused")

        assert time.monotonic() - started < 15.0
        assert f"127.0.0.1:{durable_redis.port}" in str(info.value)
        durable_redis.start()
        assert topic.stats().published == 1
        topic.destroy()


def _unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _eventually(check: Any, timeout: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if check():
            return True
        pause.wait(0.05)
    return bool(check())


def test_a_delivery_behind_a_handler_that_outlives_the_deadline_runs_as_its_first_attempt(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", ack_timeout=0.3,
                                   max_delivery_attempts=2)
    runs: list[tuple[Any, int]] = []
    warm = threading.Event()
    work = threading.Event()  # never set: the first attempt of "slow" works for 0.5 s

    def handler(delivery: Any) -> None:
        body = delivery.message
        body = body.data.decode() if isinstance(body, Message) else body
        runs.append((body, delivery.attempt))
        if body == "slow" and delivery.attempt == 1:
            work.wait(0.5)
        delivery.ack()  # late for the first "slow": SettlementError, logged
        warm.set()

    topic.create_group("g")
    topic.subscribe(handler, group="g", prefetch=2)
    topic.publish("warm")  # the member learns its handler is fast: it reads 2 next
    assert warm.wait(10)
    publisher = topic.publisher()
    publisher.publish(b"slow")  # one batch of the Publisher: one read takes both
    publisher.publish(b"next")
    publisher.flush(10)

    assert topic.join(timeout=20) is True
    # "next" waited unstarted behind "slow" past half its deadline: it went back with no
    # attempt counted; "slow" timed out and ran again.
    assert runs == [("warm", 1), ("slow", 1), ("slow", 2), ("next", 1)]
    stats = topic.stats()
    assert (stats.delivered, stats.timed_out, stats.dead_lettered) == (3, 1, 0)
    topic.destroy()


def test_throttle_slows_and_counts_publishes_near_max_pending(redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", max_pending=10, throttle=0.5)
    topic.create_group("g")

    for i in range(8):
        topic.publish(i)

    # After the 5th, 5 of 10 slots are free (ratio 0.5): the 6th..8th publishes wait.
    assert topic.stats().throttled == 3
    assert topic.stats().pending == 8
    topic.destroy()


def test_a_remote_batch_into_a_full_redis_topic_fails_whole_at_its_timeout(
        redis_bus: Bus, topic_name: str) -> None:
    from runtime.broker._remote import connect

    topic = redis_bus.create_topic(topic_name, backend="redis", max_pending=1)
    topic.create_group("g")
    topic.publish(b"held")
    server = redis_bus.serve(authkey=b"redis-batch-key")
    try:
        with connect(server.address, authkey=b"redis-batch-key") as remote:
            publisher = remote.topic(topic_name).publisher(publish_timeout=0.3)
            futures = [publisher.publish(b"m%d" % n) for n in range(3)]
            publisher.flush(timeout=30)

            errors = [future.exception(timeout=10) for future in futures]
            publisher.close(timeout=10)
    finally:
        server.close()

    assert all(isinstance(error, WouldBlock) for error in errors)
    assert topic.stats().pending == 1  # the batch took no slot


def test_closing_a_readers_bus_settles_its_held_and_unread_share_unsubscribed(
        redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as publishing, Bus(redis=redis_url) as reading:
        topic = publishing.create_topic(topic_name, backend="redis")
        reader = reading.create_topic(topic_name, backend="redis").subscription()
        reports = [topic.publish(i) for i in range(3)]
        held = reader.receive(timeout=10)

        reading.close()

        nack = Nack(f"subscriber:{reader.id}", "unsubscribed")
        assert [r.outcome.result(timeout=10).nacks for r in reports] == [(nack,)] * 3
        with pytest.raises(SettlementError):
            held.ack()  # its reader left: the share was settled already
        assert topic.join(timeout=10) is True
        stats = topic.stats()
        assert (stats.pending, stats.nacked, stats.delivered) == (0, 3, 0)
        assert len(topic.dead_letters) == 0
        topic.destroy()


def test_reader_holding_a_delivery_past_the_deadline_times_out_and_is_fenced(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", ack_timeout=0.3)
    slow = topic.subscription()
    report = topic.publish("held too long")
    held = slow.receive(timeout=10)

    outcome = report.outcome.result(timeout=10)  # the watch's reaps time it out

    assert outcome.nacks == (Nack(f"subscriber:{slow.id}", "timeout"),)
    with pytest.raises(SettlementError):
        held.ack()
    [letter] = list(topic.dead_letters)
    assert (letter.message, letter.reason, letter.group, letter.subscriber_id) == (
        "held too long", "timeout", None, slow.id)
    stats = topic.stats()
    assert (stats.pending, stats.timed_out, stats.delivered) == (0, 1, 0)
    topic.destroy()


def test_a_flushed_script_cache_is_reloaded_without_losing_a_call(
        redis_bus: Bus, redis_url: str, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis")
    seen: list[Any] = []
    done = threading.Event()

    def handle(delivery: Any) -> None:
        seen.append(delivery.message.data)
        delivery.ack()
        if len(seen) == 20:
            done.set()

    topic.subscribe(handle, group="g")
    publisher = topic.publisher()
    publisher.publish(b"before").result(timeout=10)
    redis.Redis.from_url(redis_url).script_flush()

    for i in range(19):
        publisher.publish(b"%d" % i)
    publisher.flush(10)

    assert done.wait(10) is True
    assert seen == [b"before", *(b"%d" % i for i in range(19))]
    assert topic.join(timeout=10) is True
    stats = topic.stats()
    assert (stats.published, stats.delivered, stats.pending) == (20, 20, 0)
    publisher.close()
    topic.destroy()


def test_reader_presumed_gone_reads_on_from_the_streams_end(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", ack_timeout=0.3)
    reader = topic.subscription()
    unread = topic.publish("while it did not read")
    assert unread.outcome.result(timeout=10).nacks == (
        Nack(f"subscriber:{reader.id}", "timeout"),)  # the watch's reap presumed it gone
    missed = topic.publish("while it was gone")

    with pytest.raises(TimeoutError):
        reader.receive(timeout=0.2)  # attaches anew, from the stream's end
    later = topic.publish("after it came back")
    delivery = reader.receive(timeout=10)
    delivery.ack()

    assert missed.outcome.result(timeout=10).nacks[0].reason == "no_subscribers"
    assert delivery.message == "after it came back"
    assert later.outcome.result(timeout=10).acked is True
    assert topic.join(timeout=10) is True
    reader.unsubscribe()
    topic.destroy()


def test_a_reader_of_a_destroyed_topic_does_not_bring_its_keys_back(
        redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as reading, Bus(redis=redis_url) as destroying:
        reader = reading.create_topic(topic_name, backend="redis", ack_timeout=0.3
                                      ).subscription()
        destroying.create_topic(topic_name, backend="redis", ack_timeout=0.3).destroy()

        with pytest.raises(redis.ResponseError):
            reader.receive(timeout=1)

        keys = TopicKeys.of(topic_name)
        assert redis.Redis.from_url(redis_url).exists(*keys.all()) == 0


def test_a_reader_of_every_partition_is_a_destination_of_each_publish(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", partitions=3)
    reader = topic.subscription(prefetch=10)
    reports = [topic.publish(f"m{i}", key=f"k{i}") for i in range(6)]
    assert [r.broadcast for r in reports] == [1] * 6
    assert topic.stats().pending == 6

    seen = [reader.receive(timeout=10) for _ in range(6)]
    for delivery in seen:
        delivery.ack()

    assert sorted(d.message for d in seen) == [f"m{i}" for i in range(6)]
    assert all(r.outcome.result(timeout=10).acked for r in reports)
    assert topic.join(timeout=10) is True
    assert (topic.stats().pending, topic.stats().delivered) == (0, 6)
    reader.unsubscribe()
    topic.destroy()


@pytest.mark.parametrize(("prefetch", "cost", "count"), [
    (100, 0.0, 100), (100, 20e-6, 100), (100, 200e-6, 80), (100, 0.5, 1), (10, 200e-6, 10),
])
def test_a_member_reads_about_read_work_of_its_handler_time(
        prefetch: int, cost: float, count: int) -> None:
    assert READ_WORK == 0.016
    assert read_count(prefetch, cost) == count


class _CountingReader:
    """A reader that hands out as many plain deliveries as asked, and records each ask."""

    def __init__(self, stopping: threading.Event, reads: int) -> None:
        self.asked: list[int] = []
        self._stopping, self._reads = stopping, reads

    def read(self, count: int, block: float | None) -> list[Any]:
        self.asked.append(count)
        if len(self.asked) == self._reads:
            self._stopping.set()
        return [_Plain() for _ in range(count)]

    def expired(self, delivery: Any) -> bool:
        return False

    def flush(self, *, due_only: bool = False) -> None:
        pass


class _Plain:
    pending = False


def test_a_member_with_a_slow_handler_reads_few_deliveries_at_a_time() -> None:
    stopping = threading.Event()
    reader = _CountingReader(stopping, reads=4)
    pause = threading.Event()

    def slow(_: Any) -> None:  # at least 2 ms a delivery
        pause.wait(0.002)  # sleep-ok: the handler's work is its time

    MemberLoop(reader, slow, auto_ack=False, topic="t", prefetch=50, stopping=stopping).run()

    assert reader.asked[0] == 1  # the handler's time is not known yet
    assert all(1 <= count <= 8 for count in reader.asked[1:])  # 16 ms of work at >= 2 ms each
    assert len(reader.asked) == 4


def test_competing_members_with_a_slow_handler_run_every_message_once(
        redis_bus: Bus, topic_name: str) -> None:
    # 12 messages of 0.25 s against a 1 s deadline: a member that read them all at once
    # would let most of them time out unstarted, dead-lettered with one attempt allowed.
    topic = redis_bus.create_topic(topic_name, backend="redis", ack_timeout=1.0,
                                   max_delivery_attempts=1)
    topic.create_group("g")
    reports = [topic.publish(f"m{i:02}") for i in range(12)]
    ran: list[tuple[str, int]] = []
    pause = threading.Event()

    def slow(delivery: Any) -> None:
        ran.append((delivery.message, delivery.attempt))
        pause.wait(0.25)  # sleep-ok: the handler's work is its time

    for _ in range(2):
        topic.subscribe(slow, group="g", auto_ack=True)

    assert topic.join(timeout=30) is True
    assert sorted(ran) == [(f"m{i:02}", 1) for i in range(12)]
    stats = topic.stats()
    assert (stats.delivered, stats.dead_lettered) == (12, 0)
    assert all(r.outcome.result(timeout=10).acked for r in reports)
    topic.destroy()


def test_what_waits_past_its_deadline_unstarted_goes_back_with_no_attempt_counted(
        redis_url: str, topic_name: str) -> None:
    # The member's clock: the first delivery of a batch of four runs 11 s (past the 10 s
    # deadline of the three behind it, which Redis counts from the read).
    now = [0.0]
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", ack_timeout=10.0,
                                 max_delivery_attempts=1)
        topic.create_group("g")
        topic.publish("m0")
        connection = Connection(redis_url)
        consumer = Consumer(connection, TopicKeys.of(topic_name, 0), topic_name, "g", 7,
                            topic.settings, Codec(), batch_acks=True, clock=lambda: now[0])
        stopping = threading.Event()
        ran: list[tuple[str, int]] = []

        def handler(delivery: Any) -> None:
            ran.append((delivery.message, delivery.attempt))
            if delivery.message == "m0":  # the next batch is published meanwhile
                for i in range(1, 5):
                    topic.publish(f"m{i}")
            if delivery.message == "m1":
                now[0] += 11.0
            if len(ran) == 5:
                stopping.set()

        loop = MemberLoop(consumer, handler, auto_ack=True, topic=topic_name, prefetch=10,
                          stopping=stopping)
        thread = threading.Thread(target=loop.run, name="test-member")
        thread.start()
        finished = stopping.wait(30)
        stopping.set()
        thread.join(10)
        consumer.release()
        connection.close()

        assert finished, ran
        assert ran == [("m0", 1), ("m1", 1), ("m2", 1), ("m3", 1), ("m4", 1)]
        assert topic.join(timeout=10) is True
        stats = topic.stats()
        assert (stats.delivered, stats.dead_lettered, stats.timed_out) == (5, 0, 0)
        topic.destroy()


class _TakenBack:
    """A delivery Redis took back while its handler ran: acking it is refused."""

    pending = True
    message_id = "m-late"

    def ack(self) -> None:
        raise SettlementError(self.message_id, "taken back by Redis (late)")


def test_an_auto_ack_refused_as_late_is_logged_and_the_member_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="runtime"):
        run_handler(lambda delivery: None, _TakenBack(), True, "t")  # type: ignore[arg-type]

    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "m-late was taken back before its handler returned" in caplog.text


def test_batched_acks_in_any_order_settle_each_once_and_refuse_one_taken_meanwhile(
        redis_url: str, topic_name: str) -> None:
    # One settle call fences every ack of a batch against what this consumer holds:
    # in read order or not, and with one entry another consumer claimed meanwhile.
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", ack_timeout=30.0)
        topic.create_group("g")
        for i in range(8):
            topic.publish(f"m{i}")
        connection = Connection(redis_url)
        keys = TopicKeys.of(topic_name, 0)
        consumer = Consumer(connection, keys, topic_name, "g", 7, topic.settings, Codec(),
                            batch_acks=True)
        deliveries = consumer.read(8, None)
        assert [d.message for d in deliveries] == [f"m{i}" for i in range(8)]
        taken = deliveries[3]
        client = redis.Redis.from_url(redis_url)
        client.xclaim(keys.stream, "g", "other", 0, [taken.entry_id])

        for batch in ([1, 0, 3, 5], [7, 6], [2, 4]):
            for i in batch:
                deliveries[i].ack()
            consumer.flush()

        assert [d.acked for d in deliveries] == [True] * 3 + [False] + [True] * 4
        assert taken.timed_out
        assert topic.stats().delivered == 7
        held = client.xpending_range(keys.stream, "g", "-", "+", 10)
        assert [(h["message_id"].decode(), h["consumer"].decode()) for h in held] == [
            (taken.entry_id, "other")]
        client.close()
        consumer.release()
        connection.close()
        topic.destroy()
