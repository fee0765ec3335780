"""Topics of several partitions on Redis: spreading, ownership, per-key order across
processes (DESIGN §3.10)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from support.reliability import wait_until

from runtime import Bus, TopicSettings
from runtime.errors import InvalidSettingsError
from runtime.redis._keys import TopicKeys, partition_of

ROOT = Path(__file__).resolve().parents[3]


_wait_for = partial(wait_until, timeout=30.0)  # a Redis read polled until true


def _topic_keys(client: redis.Redis, topic: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{{actorbus:{topic}:*", count=1000))


def test_the_in_memory_backend_refuses_partitions_beyond_one_naming_it() -> None:
    with Bus() as bus, pytest.raises(InvalidSettingsError) as info:
        bus.create_topic("orders", partitions=2)

    assert info.value.setting == "partitions"
    assert "partitions" in str(info.value)
    with pytest.raises(InvalidSettingsError):
        TopicSettings(partitions=2).validate()


def test_a_topic_of_several_partitions_round_trips_keyed_and_unkeyed_messages(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", partitions=3)
    pull = topic.subscription(group="g", prefetch=10)
    reports = [topic.publish(i, key=f"k{i % 4}" if i % 2 else None) for i in range(60)]
    publisher = topic.publisher()
    batch = [publisher.publish(b"m%d" % i, ordering_key=f"k{i % 3}")
             for i in range(30)]
    batch_ids = [future.result(timeout=10) for future in batch]

    got = {}
    for _ in range(90):
        delivery = pull.receive(timeout=10)
        got[delivery.message_id] = delivery.message
        delivery.ack()

    ids = [report.message_id for report in reports]
    assert len(set(ids + batch_ids)) == 90  # unique across the partitions' streams
    assert sorted(got) == sorted(ids + batch_ids)
    assert [got[i] for i in ids] == list(range(60))
    assert [got[i].data for i in batch_ids] == [b"m%d" % i for i in range(30)]
    assert all(r.outcome.result(timeout=10).acked for r in reports)
    assert topic.join(timeout=10) is True
    stats = topic.stats()
    assert (stats.published, stats.delivered, stats.pending) == (90, 90, 0)
    publisher.close(timeout=5)
    topic.destroy()


def test_keys_spread_over_the_streams_and_each_key_keeps_to_one(redis_url: str,
                                                                  topic_name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", partitions=4)
        topic.create_group("g")
        for seq in range(5):
            for k in range(12):
                topic.publish(seq, key=f"key-{k}")

        lengths = [client.xlen(TopicKeys.of(topic_name, p).stream) for p in range(4)]
        assert sum(lengths) == 60
        assert sum(1 for length in lengths if length) > 1
        for k in range(12):
            partition = partition_of(f"key-{k}", 4)
            entries = client.xrange(TopicKeys.of(topic_name, partition).stream)
            assert sum(1 for _, fields in entries if fields[b"k"] == f"key-{k}".encode()) == 5
        assert topic.stats().pending == 60
        topic.destroy()


def test_attach_with_another_partition_count_is_refused_naming_partitions(
        redis_url: str, topic_name: str) -> None:
    with Bus(redis=redis_url) as first, Bus(redis=redis_url) as second:
        topic = first.create_topic(topic_name, backend="redis", partitions=4)
        with pytest.raises(InvalidSettingsError) as info:
            second.create_topic(topic_name, backend="redis", partitions=2)
        attached = second.create_topic(topic_name, backend="redis", partitions=4)

        assert info.value.setting == "partitions"
        assert "partitions=4" in str(info.value)
        assert attached.settings.partitions == 4
        topic.destroy()


def test_destroy_deletes_every_partitions_keys(redis_url: str, topic_name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", partitions=3)
        done = threading.Event()
        seen: list[int] = []

        def handle(delivery: Any) -> None:
            seen.append(delivery.message)
            if delivery.message % 5 == 0:
                delivery.nack("refused")
            else:
                delivery.ack()
            if len(seen) == 30:
                done.set()

        topic.subscribe(handle, group="g")
        for i in range(30):
            topic.publish(i, key=f"k{i % 6}")
        assert done.wait(30)
        assert topic.join(timeout=10) is True
        assert len(topic.dead_letters) == 6
        keys = {key.decode().split("}")[0] for key in _topic_keys(client, topic_name)}
        assert keys == {f"{{actorbus:{topic_name}:{p}" for p in range(3)}

        topic.destroy()
        assert _topic_keys(client, topic_name) == []


def test_dead_letters_stats_and_replay_read_across_partitions(redis_bus: Bus,
                                                              topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", partitions=3)
    pull = topic.subscription(group="g", prefetch=5)
    reports = [topic.publish(i, key=f"k{i}") for i in range(12)]
    for _ in range(12):
        pull.receive(timeout=10).nack("no")

    letters = list(topic.dead_letters)
    assert sorted(letter.message_id for letter in letters) == sorted(r.message_id for r in reports)
    assert {letter.reason for letter in letters} == {"nack"}
    assert [r.outcome.result(timeout=10).nacks[0].reason for r in reports] == ["nack"] * 12
    assert topic.dead_letters.replay() == 12
    assert len(topic.dead_letters) == 0
    again = sorted(pull.receive(timeout=10).message for _ in range(12))
    assert again == list(range(12))
    stats = topic.stats()
    assert (stats.published, stats.nacked, stats.dead_lettered) == (12, 12, 12)
    topic.destroy()


def test_a_broadcast_subscriber_reads_every_partition_and_unkeyed_messages_spread(
        redis_url: str, topic_name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", partitions=3)
        pull = topic.subscription()  # a broadcast reader
        reports = [topic.publish(i, key=None if i % 2 else f"k{i}") for i in range(30)]

        got = {}
        for _ in range(30):
            delivery = pull.receive(timeout=10)
            got[delivery.message_id] = delivery.message
            delivery.ack()

        assert got == {r.message_id: i for i, r in enumerate(reports)}
        assert all(r.broadcast == 1 and r.outcome.result(timeout=10).acked for r in reports)
        lengths = [client.xlen(TopicKeys.of(topic_name, p).stream) for p in range(3)]
        assert sum(lengths) == 30
        assert min(lengths) > 0  # 15 unkeyed publishes take every partition in turn
        pull.unsubscribe()
        assert [client.scard(TopicKeys.of(topic_name, p).readers) for p in range(3)] == [0] * 3
        topic.destroy()


def test_each_partition_has_one_owner_and_a_new_member_takes_its_share(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", partitions=4)
    first = topic.subscribe(lambda d: d.ack(), group="g")
    assert _wait_for(lambda: None not in topic.owners().get("g", [None]))
    assert len(set(topic.owners()["g"])) == 1  # alone, it owns all four

    second = topic.subscribe(lambda d: d.ack(), group="g")
    # The first gives two back at its next look; the second takes them.
    assert _wait_for(lambda: sorted(topic.owners()["g"].count(o) for o in
                                    set(topic.owners()["g"]) if o) == [2, 2])
    first.unsubscribe()
    assert _wait_for(lambda: len(set(topic.owners()["g"])) == 1
                     and None not in topic.owners()["g"])
    second.unsubscribe()
    assert topic.owners() == {"g": [None] * 4}
    topic.destroy()


def test_a_redelivered_keyed_message_runs_before_the_later_messages_of_its_key(
        redis_bus: Bus, topic_name: str) -> None:
    topic = redis_bus.create_topic(topic_name, backend="redis", partitions=2,
                                   max_delivery_attempts=3)
    runs: list[tuple[str, int, int]] = []
    done = threading.Event()

    def handle(delivery: Any) -> None:
        runs.append((delivery.key, delivery.message, delivery.attempt))
        if delivery.message in (3, 7) and delivery.attempt < 3:
            delivery.nack("again")
        else:
            delivery.ack()
        if len(runs) == 2 * 20 + 4 * 2:
            done.set()

    topic.create_group("g")
    for seq in range(20):
        for key in ("a", "b"):
            topic.publish(seq, key=key)
    topic.subscribe(handle, group="g", prefetch=50)

    assert done.wait(30)
    assert topic.join(timeout=10) is True
    for key in ("a", "b"):
        order = [seq for k, seq, _ in runs if k == key]
        assert order == [0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 7, 7, *range(8, 20)]
    assert topic.stats().redelivered == 8
    topic.destroy()


_CONSUMER = textwrap.dedent("""
    import os, sys, time
    import redis
    from runtime import Bus
    url, name, log = sys.argv[1], sys.argv[2], sys.argv[3]
    client = redis.Redis.from_url(url)
    bus = Bus(redis=url)
    topic = bus.create_topic(name, backend="redis", partitions=6, max_delivery_attempts=3)
    pid = os.getpid()
    def handle(delivery):
        # the start order: one list, pushed to atomically by every process
        client.rpush(log, f"{delivery.key} {delivery.message} {pid} {delivery.attempt}")
        time.sleep(0.004)  # sleep-ok: the work a message takes
        delivery.ack()
    topic.subscribe(handle, group="g", prefetch=10)
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    bus.close()
""")


def test_per_key_order_holds_across_processes_when_one_is_killed_mid_stream(
        redis_url: str, topic_name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    log = f"{topic_name}:log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", partitions=6,
                                 max_delivery_attempts=3)
        topic.create_group("g")
        consumers = [subprocess.Popen([sys.executable, "-c", _CONSUMER, redis_url, topic_name,
                                       log], env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True) for _ in range(3)]
        try:
            for consumer in consumers:
                assert consumer.stdout is not None
                assert consumer.stdout.readline().strip() == "ready"
            pids = {consumer.pid for consumer in consumers}
            for seq in range(60):
                for k in range(12):
                    topic.publish(seq, key=f"k{k}")

            assert _wait_for(lambda: client.llen(log) >= 200)
            counts = dict.fromkeys(pids, 0)
            for entry in client.lrange(log, 0, -1):
                counts[int(entry.split()[2])] += 1
            victim = next(c for c in consumers if c.pid == max(counts, key=counts.__getitem__))
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            killed_at = client.llen(log)

            assert topic.join(timeout=90) is True
        finally:
            for consumer in consumers:
                if consumer.poll() is None:
                    assert consumer.stdin is not None
                    consumer.stdin.close()
            for consumer in consumers:
                try:
                    consumer.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    consumer.kill()
                    consumer.wait(timeout=10)

        runs = [entry.decode().split() for entry in client.lrange(log, 0, -1)]
        stats = topic.stats()
        assert stats.published == 720
        assert stats.delivered + stats.dead_lettered == 720  # nothing lost
        assert stats.pending == 0
        first_run: dict[tuple[str, int], int] = {}
        for position, (key, seq, _, _) in enumerate(runs):
            first_run.setdefault((key, int(seq)), position)
        assert len(first_run) == 720  # every message ran
        for k in range(12):
            starts = [first_run[(f"k{k}", seq)] for seq in range(60)]
            assert starts == sorted(starts), f"k{k} ran out of order"
        survivors = {int(pid) for _, _, pid, _ in runs[killed_at:]}
        assert victim.pid not in survivors
        assert survivors  # the others finished what the killed one owned
        topic.destroy()
        client.delete(log)


def test_worker_processes_own_partitions_and_a_crashed_one_loses_nothing(
        redis_url: str, topic_name: str) -> None:
    from support.redis_handlers import Recorder

    key = f"{topic_name}:seen"
    client = redis.Redis.from_url(redis_url)
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", partitions=2,
                                 max_delivery_attempts=2, ack_timeout=60.0)
        topic.subscribe(Recorder(redis_url, key, crash_on=57), group="g", workers=2,
                        prefetch=20)
        assert _wait_for(lambda: len(set(topic.owners()["g"]) - {None}) == 2)

        for i in range(300):
            topic.publish(i, key=f"k{i % 10}")

        assert topic.join(timeout=60) is True  # long before the 60 s deadline
        counts = {int(k): int(v) for k, v in client.hgetall(key).items()}
        stats = topic.stats()
        assert sorted(counts) == list(range(300))
        assert (stats.delivered, stats.dead_lettered, stats.pending) == (300, 0, 0)
        assert stats.nacked == 1  # only the delivery it was running counted an attempt
        topic.destroy()
        client.delete(key, f"{key}:pid")


def test_max_pending_bounds_each_partition_and_held_by_names_it(redis_bus: Bus,
                                                                 topic_name: str) -> None:
    from runtime.errors import WouldBlock

    topic = redis_bus.create_topic(topic_name, backend="redis", partitions=2, max_pending=2)
    topic.create_group("g")
    keys = [f"k{i}" for i in range(20)]
    full_key = keys[0]
    other_key = next(k for k in keys if partition_of(k, 2) != partition_of(full_key, 2))
    topic.publish(1, key=full_key)
    topic.publish(2, key=full_key)

    with pytest.raises(WouldBlock):
        topic.publish(3, key=full_key, timeout=0.1)
    held = topic.held_by()
    topic.publish(4, key=other_key, timeout=0.1)  # its partition has room

    assert held == (f"topic {topic_name!r}: max_pending (2/2) in partition "
                    f"{partition_of(full_key, 2)}")
    assert topic.stats().pending == 3
    topic.destroy()
