"""Nothing is lost when worker processes, the application or redis-server itself die."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import redis
from support.redis_handlers import Recorder

from runtime import Bus, Nack

ROOT = Path(__file__).resolve().parents[3]



def test_worker_processes_share_a_group_and_handle_each_message_once(
        redis_url: str, topic_name: str) -> None:
    key = f"{topic_name}:seen"
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis")
        topic.subscribe(Recorder(redis_url, key), group="g", workers=2, prefetch=10)

        for i in range(600):
            topic.publish(i)

        assert topic.join(timeout=60) is True
        client = redis.Redis.from_url(redis_url)
        counts = {int(k): int(v) for k, v in client.hgetall(key).items()}
        pids = set(client.hvals(f"{key}:pid"))
        assert sorted(counts) == list(range(600))
        assert set(counts.values()) == {1}
        assert len(pids) == 2
        assert topic.stats().delivered == 600
        topic.destroy()
        client.delete(key, f"{key}:pid")


def test_killed_worker_settles_worker_crashed_for_what_it_ran_and_nothing_is_lost(
        redis_url: str, topic_name: str) -> None:
    key = f"{topic_name}:seen"
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", max_delivery_attempts=2,
                                 ack_timeout=60.0)
        topic.subscribe(Recorder(redis_url, key, crash_on=57), group="g", workers=2,
                        prefetch=20)

        for i in range(300):
            topic.publish(i)

        assert topic.join(timeout=60) is True  # long before the 60 s deadline
        client = redis.Redis.from_url(redis_url)
        counts = {int(k): int(v) for k, v in client.hgetall(key).items()}
        stats = topic.stats()
        assert sorted(counts) == list(range(300))
        assert (stats.delivered, stats.dead_lettered, stats.pending) == (300, 0, 0)
        assert stats.nacked == 1  # only the delivery it was running counted an attempt
        assert stats.redelivered == 1
        topic.destroy()
        client.delete(key, f"{key}:pid")


def test_crash_on_the_last_attempt_is_dead_lettered_worker_crashed(
        redis_url: str, topic_name: str) -> None:
    key = f"{topic_name}:seen"
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", ack_timeout=60.0)
        topic.subscribe(Recorder(redis_url, key, crash_on=5), group="g", workers=1,
                        prefetch=4)

        reports = [topic.publish(i) for i in range(20)]

        assert topic.join(timeout=60) is True
        [letter] = list(topic.dead_letters)
        assert (letter.message, letter.reason, letter.attempts) == (5, "worker_crashed", 1)
        assert reports[5].outcome.result(timeout=10).nacks[0].reason == "worker_crashed"
        assert all(r.outcome.result(timeout=10).acked for i, r in enumerate(reports) if i != 5)
        topic.destroy()
        redis.Redis.from_url(redis_url).delete(key, f"{key}:pid")


_APPLICATION = textwrap.dedent("""
    import sys, threading
    from runtime import Bus, Nack
    url, name = sys.argv[1], sys.argv[2]
    bus = Bus(redis=url)
    topic = bus.create_topic(name, backend="redis", ack_timeout=1.0, max_delivery_attempts=11)
    started = threading.Event()
    def handle(delivery):
        started.set()
        delivery.ack()
    topic.subscribe(handle, group="g", prefetch=50)
    started.wait(30)
    print("handling", flush=True)
    threading.Event().wait(60)
""")


def test_application_killed_mid_stream_and_restarted_loses_nothing(
        redis_url: str, topic_name: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with Bus(redis=redis_url) as bus:
        # Ten kills: a delivery a killed application held may be taken by every later one,
        # so the attempts outnumber the kills and nothing can be dead-lettered for them.
        topic = bus.create_topic(topic_name, backend="redis", ack_timeout=1.0,
                                 max_delivery_attempts=11)
        topic.create_group("g")
        for round_ in range(10):
            for i in range(600):
                topic.publish(round_ * 600 + i)
            application = subprocess.Popen(
                [sys.executable, "-c", _APPLICATION, redis_url, topic_name], env=env,
                stdout=subprocess.PIPE, text=True)
            assert application.stdout is not None
            assert application.stdout.readline().strip() == "handling"
            application.send_signal(signal.SIGKILL)
            application.wait(timeout=10)

        restarted = topic.subscription(group="g", prefetch=100)
        deadline = time.monotonic() + 90  # a bounded drain: the assertions say what is left
        while topic.stats().pending and time.monotonic() < deadline:
            try:
                delivery = restarted.receive(timeout=5)
            except TimeoutError:
                continue
            delivery.ack()

        stats = topic.stats()
        assert stats.published == 6000
        assert stats.delivered + stats.dead_lettered == 6000
        assert stats.dead_lettered == 0
        assert stats.pending == 0
        topic.destroy()


def test_redis_killed_with_aof_everysec_keeps_every_acknowledged_publish(durable_redis: Any,
                                                                         topic_name: str) -> None:
    with Bus(redis=durable_redis.url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", max_pending=1000)
        pull = topic.subscription(group="g", prefetch=50)
        ids = [topic.publish(i).message_id for i in range(500)]
        handled = []
        for _ in range(200):
            delivery = pull.receive(timeout=10)
            handled.append(delivery.message_id)
            delivery.ack()

        durable_redis.kill()
        durable_redis.start()

        # everysec may drop the last second of writes when the fsync lags (the last acks
        # and reads, redelivered then: at least once); a publish made before is never lost.
        while topic.stats().pending:
            delivery = pull.receive(timeout=10)
            handled.append(delivery.message_id)
            delivery.ack()
        stats = topic.stats()
        assert sorted(set(handled)) == sorted(ids)
        assert handled[-1] == ids[-1]
        assert (stats.published, stats.delivered, stats.pending) == (500, 500, 0)
        assert topic.join(timeout=10) is True
        topic.destroy()


_READER = textwrap.dedent("""
    import sys, threading
    from runtime import Bus
    url, name = sys.argv[1], sys.argv[2]
    bus = Bus(redis=url)
    reader = bus.create_topic(name, backend="redis", ack_timeout=1.0).subscription()
    print("attached", reader.id, flush=True)
    threading.Event().wait(60)
""")


def test_killed_broadcast_reader_stays_pending_then_its_share_times_out(
        redis_url: str, topic_name: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", ack_timeout=1.0)
        reader = subprocess.Popen([sys.executable, "-c", _READER, redis_url, topic_name],
                                  env=env, stdout=subprocess.PIPE, text=True)
        assert reader.stdout is not None
        word, reader_id = reader.stdout.readline().split()
        assert word == "attached"
        report = topic.publish("for the reader")
        pending_while_attached = topic.stats().pending

        reader.send_signal(signal.SIGKILL)
        reader.wait(timeout=10)

        assert (report.broadcast, pending_while_attached) == (1, 1)
        outcome = report.outcome.result(timeout=20)  # after its 1 s without a read
        assert outcome.nacks == (Nack(f"subscriber:{reader_id}", "timeout"),)
        assert topic.join(timeout=10) is True
        stats = topic.stats()
        assert (stats.pending, stats.timed_out, stats.delivered) == (0, 1, 0)
        assert bus.topic(topic_name).publish("nobody").outcome.result(
            timeout=10).nacks[0].reason == "no_subscribers"
        topic.destroy()
