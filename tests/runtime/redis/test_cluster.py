"""Redis topics on a Redis Cluster (3 masters on loopback): the same behaviour as on one
server, with topics spread over the masters. The behaviour cases of `test_behaviour` run
here too (their ``redis_cluster`` variant)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from support.redis_handlers import Recorder

from runtime import Bus, Message
from runtime.cli._main import main
from runtime.errors import BackendUnavailableError, InvalidSettingsError
from runtime.redis._keys import TopicKeys


def _master_of(cluster_url: str, key: str) -> int:
    """The port of the master that holds ``key``'s slot."""
    client = RedisCluster.from_url(cluster_url.replace("redis+cluster", "redis"))
    try:
        return int(client.get_node_from_key(key).port)
    finally:
        client.close()


@pytest.fixture
def names_on_every_master(redis_cluster: Any) -> dict[int, str]:
    """One fresh topic name per master: master port -> a name whose keys live there."""
    names: dict[int, str] = {}
    client = RedisCluster.from_url(redis_cluster.url.replace("redis+cluster", "redis"))
    try:
        while len(names) < len(redis_cluster.ports):
            name = f"t-{uuid.uuid4().hex[:12]}"
            names.setdefault(int(client.get_node_from_key(TopicKeys.of(name).stream).port), name)
    finally:
        client.close()
    return names


@pytest.fixture
def cluster_bus(redis_cluster_url: str) -> Iterator[Bus]:
    """A bus on the session's cluster."""
    with Bus(redis=redis_cluster_url) as bus:
        yield bus


def test_topics_whose_slots_are_on_different_masters_all_work(
        cluster_bus: Bus, redis_cluster: Any, names_on_every_master: dict[int, str]) -> None:
    topics = {port: cluster_bus.create_topic(name, backend="redis")
              for port, name in names_on_every_master.items()}
    seen: dict[str, list[int]] = {name: [] for name in names_on_every_master.values()}
    for topic in topics.values():
        topic.subscribe(lambda d, name=topic.name: (seen[name].append(d.message), d.ack()),
                        group="g")

    reports = {port: [topic.publish(i) for i in range(20)] for port, topic in topics.items()}

    for port, topic in topics.items():
        assert all(r.outcome.result(timeout=10).acked for r in reports[port])
        assert topic.join(timeout=10) is True
        assert sorted(seen[topic.name]) == list(range(20))
        assert (topic.stats().published, topic.stats().delivered) == (20, 20)
        slot = key_slot(TopicKeys.of(topic.name).stream.encode())
        holders = [p for p in redis_cluster.ports
                   if redis.Redis(port=p).execute_command("CLUSTER COUNTKEYSINSLOT", slot)]
        assert holders == [port]
    assert sorted(topics) == sorted(redis_cluster.ports)
    for topic in topics.values():
        topic.destroy()


def test_declare_attach_and_destroy_on_a_cluster(redis_cluster_url: str, topic_name: str) -> None:
    keys = TopicKeys.of(topic_name)
    master = redis.Redis(port=_master_of(redis_cluster_url, keys.settings))
    with (Bus(redis=redis_cluster_url) as first, Bus(redis=redis_cluster_url) as second,
          Bus(redis=redis_cluster_url) as third):
        topic = first.create_topic(topic_name, backend="redis", max_delivery_attempts=3)
        topic.create_group("g")
        topic.publish("kept")

        attached = second.create_topic(topic_name, backend="redis", max_delivery_attempts=3)
        delivery = attached.subscription(group="g").receive(timeout=10)
        delivery.ack()
        with pytest.raises(InvalidSettingsError) as differs:
            third.create_topic(topic_name, backend="redis", max_delivery_attempts=4)

        assert delivery.message == "kept"
        assert attached.join(timeout=10) is True
        assert differs.value.setting == "max_delivery_attempts"
        assert master.exists(keys.settings) == 1
        second.close()
        topic.destroy()
        assert master.exists(*keys.all()) == 0


def test_worker_processes_on_a_cluster_handle_each_message_once(
        redis_cluster_url: str, redis_url: str, topic_name: str) -> None:
    key = f"{topic_name}:seen"  # recorded on the single server, read back here
    with Bus(redis=redis_cluster_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis")
        topic.subscribe(Recorder(redis_url, key), group="g", workers=2, prefetch=10)

        for i in range(200):
            topic.publish(i)

        assert topic.join(timeout=60) is True
        client = redis.Redis.from_url(redis_url)
        counts = {int(k): int(v) for k, v in client.hgetall(key).items()}
        assert sorted(counts) == list(range(200))
        assert set(counts.values()) == {1}
        assert len(set(client.hvals(f"{key}:pid"))) == 2
        assert topic.stats().delivered == 200
        topic.destroy()
        client.delete(key, f"{key}:pid")


def test_stats_and_dlq_on_the_command_line_read_every_master(
        cluster_bus: Bus, redis_cluster_url: str, names_on_every_master: dict[int, str],
        capsys: Any) -> None:
    topics = [cluster_bus.create_topic(name, backend="redis", max_delivery_attempts=1)
              for name in names_on_every_master.values()]
    for topic in topics:
        topic.subscribe(lambda d: d.nack("refused"), group="g")
        topic.publish("x").outcome.result(timeout=10)

    assert main(["stats", "--redis", redis_cluster_url]) == 0
    listed = capsys.readouterr().out
    assert main(["dlq", topics[0].name, "--redis", redis_cluster_url]) == 0
    letters = capsys.readouterr().out

    assert all(topic.name in listed for topic in topics)
    assert "refused" in letters
    for topic in topics:
        topic.destroy()


def test_publisher_batches_survive_masters_that_lost_their_scripts(
        cluster_bus: Bus, redis_cluster: Any, topic_name: str) -> None:
    topic = cluster_bus.create_topic(topic_name, backend="redis")
    topic.create_group("g")
    topic.publish("warm")  # the scripts are loaded now
    for port in redis_cluster.ports:
        redis.Redis(port=port).script_flush()
    publisher = topic.publisher()

    futures = [publisher.publish(f"m{i}".encode()) for i in range(50)]
    publisher.flush(timeout=10)

    ids = [future.result(timeout=10) for future in futures]
    pull = topic.subscription(group="g", prefetch=51)
    received = [pull.receive(timeout=10) for _ in range(51)]
    for delivery in received:
        delivery.ack()
    assert len(set(ids)) == 50
    assert [d.message.data for d in received[1:]] == [f"m{i}".encode() for i in range(50)]
    assert received[0].message == "warm"
    assert topic.join(timeout=10) is True
    publisher.close()
    topic.destroy()


def test_a_given_cluster_client_that_decodes_is_read_as_bytes_and_stays_open(
        redis_cluster_url: str, topic_name: str) -> None:
    client = RedisCluster.from_url(redis_cluster_url.replace("redis+cluster", "redis"),
                                   decode_responses=True)
    with Bus(redis=client) as bus:
        topic = bus.create_topic(topic_name, backend="redis")
        pull = topic.subscription(group="g")
        topic.publish(Message(data=b"\xff\x00"))
        delivery = pull.receive(timeout=10)
        delivery.ack()
        assert delivery.message.data == b"\xff\x00"
        topic.destroy()

    assert client.ping() is True
    client.close()


@pytest.mark.parametrize("scheme", ["redis+cluster", "rediss+cluster"])
def test_a_cluster_that_is_down_is_a_typed_error_naming_its_url(scheme: str) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()

    with (Bus(redis=f"{scheme}://127.0.0.1:{port}") as bus,
          pytest.raises(BackendUnavailableError) as info):
        bus.create_topic("orders", backend="redis")

    assert time.monotonic() - started < 10.0
    assert f"{scheme}://127.0.0.1:{port}" in str(info.value)


def test_publish_to_a_topic_whose_master_died_raises_naming_the_cluster(
        own_redis_cluster: Any) -> None:
    cluster = own_redis_cluster
    client = RedisCluster.from_url(cluster.url.replace("redis+cluster", "redis"))
    name = next(name for name in (f"t-{uuid.uuid4().hex[:12]}" for _ in range(1000))
                if int(client.get_node_from_key(TopicKeys.of(name).stream).port)
                == cluster.ports[1])
    client.close()
    with Bus(redis=cluster.url) as bus:
        topic = bus.create_topic(name, backend="redis")
        topic.create_group("g")
        topic.publish("kept")
        cluster.nodes[1].kill()
        started = time.monotonic()

        with pytest.raises(BackendUnavailableError) as info:
            topic.publish("refused")

        assert time.monotonic() - started < 15.0
        assert cluster.url in str(info.value)


def test_a_topic_of_six_partitions_spreads_over_the_masters_and_delivers_each_once(
        cluster_bus: Bus, redis_cluster: Any) -> None:
    # Six slots land on one master about once in 240 names: take a name whose partitions
    # the cluster's slot map puts on more than one, then check the streams are really there.
    client = RedisCluster.from_url(redis_cluster.url.replace("redis+cluster", "redis"))
    try:
        while True:
            topic_name = f"t-{uuid.uuid4().hex[:12]}"
            mapped = {int(client.get_node_from_key(TopicKeys.of(topic_name, p).stream).port)
                      for p in range(6)}
            if len(mapped) >= 2:
                break
    finally:
        client.close()
    topic = cluster_bus.create_topic(topic_name, backend="redis", partitions=6)
    seen: list[int] = []
    done = threading.Event()

    def handle(delivery: Any) -> None:
        seen.append(delivery.message)
        delivery.ack()
        if len(seen) >= 600:
            done.set()

    topic.subscribe(handle, group="g")
    topic.subscribe(handle, group="g")
    reports = [topic.publish(i, key=f"k{i % 24}") for i in range(300)]
    reports += [topic.publish(i) for i in range(300, 600)]

    assert all(r.outcome.result(timeout=30).acked for r in reports)
    assert done.wait(timeout=30)
    assert topic.join(timeout=10) is True
    assert sorted(seen) == list(range(600))
    assert (topic.stats().published, topic.stats().delivered) == (600, 600)
    holders = set()
    for partition in range(6):
        slot = key_slot(TopicKeys.of(topic_name, partition).stream.encode())
        for port in redis_cluster.ports:
            client = redis.Redis(port=port)
            try:
                if client.execute_command("CLUSTER COUNTKEYSINSLOT", slot):
                    holders.add(port)
            finally:
                client.close()
    assert holders == mapped
    topic.destroy()


@pytest.mark.spark
def test_the_spark_source_plans_reads_and_acks_each_partition_on_its_master(
        cluster_bus: Bus, redis_cluster: Any, redis_cluster_url: str) -> None:
    """The Redis source's driver and executor calls on a cluster, without a Spark session:
    each partition's plan, plain reads (`Connection.plain_reader` on the master of its
    slot) and acks go to the master that holds it."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from runtime.spark._options import RedisSourceOptions
    from runtime.spark.redis._source import RedisStreamReader

    client = RedisCluster.from_url(redis_cluster.url.replace("redis+cluster", "redis"))
    try:
        while True:  # partitions on more than one master (see the test above)
            name = f"t-{uuid.uuid4().hex[:12]}"
            if len({int(client.get_node_from_key(TopicKeys.of(name, p).stream).port)
                    for p in range(3)}) >= 2:
                break
    finally:
        client.close()
    topic = cluster_bus.create_topic(name, backend="redis", partitions=3)
    topic.create_group("spark")
    for n in range(60):
        topic.publish(Message(data=f"m{n}".encode(), attributes={"n": str(n)}),
                      key=f"k{n % 5}" if n % 2 else None)
    schema = StructType([
        StructField("message_id", StringType()), StructField("key", StringType()),
        StructField("payload", BinaryType()),
        StructField("attributes", MapType(StringType(), StringType())),
        StructField("published_at", TimestampType()), StructField("attempt", IntegerType())])
    options = RedisSourceOptions.parse(
        {"redis": redis_cluster_url, "topic": name, "group": "spark"})
    connection = options.connect()
    reader = RedisStreamReader(options, schema, options.check(connection, "spark"))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        rows = [row for part in reader.partitions(start, end)
                for batch in reader.read(part) for row in batch.to_pylist()]
        reader.commit(end)
    finally:
        reader.stop()
        connection.close()
    assert sorted(row["payload"] for row in rows) == sorted(f"m{n}".encode() for n in range(60))
    by_payload = {row["payload"]: row for row in rows}
    assert by_payload[b"m3"]["key"] == "k3" and by_payload[b"m4"]["key"] is None
    assert dict(by_payload[b"m7"]["attributes"]) == {"n": "7"}
    assert {row["attempt"] for row in rows} == {1}
    assert topic.join(timeout=10) is True
    assert topic.stats().delivered == 60
