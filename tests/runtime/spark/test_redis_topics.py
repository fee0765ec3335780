"""``format("actorbus").option("redis", url)``: Spark reads and writes Redis topics
directly, on a real local[2] session and a real redis-server this module owns."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support.redis_server import (
    REDIS_CLI,
    REDIS_SERVER,
    SKIP_CLUSTER_REASON,
    SKIP_REASON,
    RedisClusterNodes,
    RedisServer,
    started_cluster,
)
from support.reliability import wait_until
from support.spark import drain, finish, needs_spark, spark_session

from runtime import Bus, Message
from runtime.redis._keys import TopicKeys

pytestmark = [*needs_spark, pytest.mark.timeout(300)]

DRIVER = Path(__file__).parents[2] / "support" / "spark_driver.py"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """Started before the session: the leak check counts it as existing."""
    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    with tempfile.TemporaryDirectory(prefix="actorbus-spark-redis-") as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        yield server
        server.stop()


@pytest.fixture(scope="module")
def spark(redis_server: RedisServer) -> Iterator[Any]:
    from runtime.spark import register

    for session in spark_session("local[2]"):
        register(session)
        yield session


@pytest.fixture
def bus(redis_server: RedisServer) -> Iterator[Bus]:
    with Bus(redis=redis_server.url) as bus:
        yield bus


def topic_pair(bus: Bus, name: str, partitions: int = 1, **settings: Any) -> tuple[Any, Any]:
    """Redis topics ``{name}-in`` (group "spark", with ``settings``) and ``{name}-out``
    (group "check"), of ``partitions`` each."""
    source = bus.create_topic(f"{name}-in", backend="redis", partitions=partitions, **settings)
    source.create_group("spark")
    sink = bus.create_topic(f"{name}-out", backend="redis", partitions=partitions)
    sink.create_group("check")
    return source, sink


@pytest.fixture
def topics(bus: Bus) -> Callable[..., tuple[Any, Any]]:
    """Fresh Redis topics: an input (group "spark") and an output (group "check")."""

    def make(**settings: Any) -> tuple[Any, Any]:
        return topic_pair(bus, f"s-{uuid.uuid4().hex[:10]}", **settings)

    return make


def upper_query(spark: Any, url: str, source: str, sink: str, checkpoint: Path,
                **source_options: Any) -> Any:
    """``source`` -> upper(payload) -> ``sink`` on Redis, trigger availableNow."""
    from pyspark.sql import functions as F

    frame = (spark.readStream.format("actorbus").option("redis", url).option("topic", source)
             .option("group", "spark")
             .options(**{k: str(v) for k, v in source_options.items()}).load())
    out = frame.select(F.upper(F.col("payload").cast("string")).alias("payload"), "key", "attributes")
    return (out.writeStream.format("actorbus").option("redis", url).option("topic", sink)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def publish_all(topic: Any, payloads: list[bytes]) -> None:
    """Publish each payload as a `Message` with attribute ``n``; odd ones keyed."""
    for n, payload in enumerate(payloads):
        topic.publish(Message(data=payload, attributes={"n": str(n)}),
                      key=f"k{n % 3}" if n % 2 else None)


def test_a_stream_writes_every_row_once_and_acks_every_input(
    spark: Any, redis_server: RedisServer, topics: Any, tmp_path: Path
) -> None:
    source, sink = topics()
    payloads = [f"m{n}".encode() for n in range(250)]
    publish_all(source, payloads)
    source.publish({"not": "bytes"})  # a pickled object: its payload is its JSON

    finish(upper_query(spark, redis_server.url, source.name, sink.name, tmp_path / "ck",
                       max_messages_per_batch=100))

    out = drain(sink)
    assert sorted(m.data for m in out) == sorted([p.upper() for p in payloads] + [b'{"NOT":"BYTES"}'])
    by_data = {m.data: m for m in out}
    assert [by_data[f"M{n}".encode()].attributes for n in range(3)] == [{"n": "0"}, {"n": "1"}, {"n": "2"}]
    assert [by_data[f"M{n}".encode()].ordering_key for n in range(4)] == [None, "k1", None, "k0"]
    assert wait_until(lambda: source.stats().pending == 0, timeout=30)  # the last batch: the listener
    stats = source.stats()
    assert (stats.published, stats.delivered, stats.dead_lettered) == (251, 251, 0)
    assert sink.stats().published == 251


def test_a_second_run_reads_only_what_came_after(
    spark: Any, redis_server: RedisServer, topics: Any, tmp_path: Path
) -> None:
    source, sink = topics()
    publish_all(source, [b"a", b"b"])
    finish(upper_query(spark, redis_server.url, source.name, sink.name, tmp_path / "ck"))
    assert wait_until(lambda: source.stats().pending == 0, timeout=30)
    publish_all(source, [b"c"])

    finish(upper_query(spark, redis_server.url, source.name, sink.name, tmp_path / "ck"))

    assert sorted(m.data for m in drain(sink)) == [b"A", b"B", b"C"]
    assert wait_until(lambda: source.stats().pending == 0, timeout=30)
    assert source.stats().delivered == 3


def test_an_undecodable_body_is_dead_lettered_and_its_neighbours_flow(
    spark: Any, redis_server: RedisServer, topics: Any, tmp_path: Path, bus: Bus
) -> None:
    from runtime.redis._connection import Connection
    from runtime.redis._keys import TopicKeys

    source, sink = topics()
    publish_all(source, [b"a"])
    connection = Connection(redis_server.url)
    try:  # what anyone with access to the Redis could write: a body no unpickler accepts
        connection.client.xadd(TopicKeys.of(source.name).stream, {"b": b"\x80junk", "f": "p"})
        connection.client.hincrby(TopicKeys.of(source.name).stats, "pending", 1)
    finally:
        connection.close()
    publish_all(source, [b"b"])

    finish(upper_query(spark, redis_server.url, source.name, sink.name, tmp_path / "ck"))

    assert sorted(m.data for m in drain(sink)) == [b"A", b"B"]
    assert wait_until(lambda: source.stats().pending == 0, timeout=30)
    letters = source.dead_letters.drain()
    assert [(d.reason, d.group) for d in letters] == [("error", "spark")]


@pytest.mark.slow
def test_a_driver_killed_inside_a_planned_batch_restarts_without_loss_or_duplicates(
    spark: Any, redis_server: RedisServer, topics: Any, tmp_path: Path
) -> None:
    source, sink = topics()
    payloads = [f"m{n}".encode() for n in range(60)]
    payloads[45] = b"stall"  # the driver blocks in batch 2 (entries 40-59): planned, not committed
    publish_all(source, payloads)
    marker, checkpoint = tmp_path / "stalled", tmp_path / "ck"
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), redis_server.url, source.name, sink.name, str(checkpoint),
         str(marker), "0"], start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        assert wait_until(marker.exists, timeout=180, poll=0.1), "the driver never reached batch 2"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    assert source.stats().pending == 20  # batch 2, held by the query's consumer

    finish(upper_query(spark, redis_server.url, source.name, sink.name, checkpoint,
                       max_messages_per_batch=20))

    assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in payloads)
    assert wait_until(lambda: source.stats().pending == 0, timeout=30)
    assert (source.stats().delivered, source.stats().dead_lettered) == (60, 0)


def test_a_retried_sink_commit_publishes_once(redis_server: RedisServer, topics: Any) -> None:
    from runtime.redis._connection import Connection
    from runtime.redis._keys import TopicKeys
    from runtime.spark.redis._sink import commit_parts

    _, sink = topics()
    connection = Connection(redis_server.url)
    try:  # two parts as two write tasks stage them
        keys = TopicKeys.of(sink.name)
        connection.client.rpush(keys.staged("p", "7", "0:0:0:p"), "p", b"x", b"y")
        connection.client.rpush(keys.staged("p", "7", "1:0:0:m"), "m", b"z", "m", "k", '{"n": "1"}')
        parts = [(0, "0:0:0:p"), (0, "1:0:0:m")]

        first = commit_parts(connection, sink.name, sink.settings, "p", "7", parts)
        again = commit_parts(connection, sink.name, sink.settings, "p", "7", parts)
    finally:
        connection.close()

    assert (first, again) == (3, 0)
    out = drain(sink)
    assert [(m.data, m.ordering_key, m.attributes) for m in out] == [
        (b"x", None, {}), (b"y", None, {}), (b"z", "k", {"n": "1"})]
    assert sink.stats().published == 3


def test_a_batch_write_with_the_same_batch_id_publishes_once(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    _, sink = topics()
    frame = spark.createDataFrame([(f"r{n}", ) for n in range(30)], "payload string")

    for _ in range(2):
        (frame.write.format("actorbus").option("redis", redis_server.url).option("topic", sink.name)
         .option("producer_id", "job").option("batch_id", "b1").mode("append").save())

    assert sorted(m.data for m in drain(sink)) == sorted(f"r{n}".encode() for n in range(30))


def test_rows_with_an_error_go_to_the_dead_letters(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    _, sink = topics()
    frame = spark.createDataFrame([("good", None), ("bad", "no price")], "payload string, problem string")

    (frame.write.format("actorbus").option("redis", redis_server.url).option("topic", sink.name)
     .option("error_column", "problem").mode("append").save())

    assert [m.data for m in drain(sink)] == [b"good"]
    letters = sink.dead_letters.drain()
    assert [(d.message.data, d.reason, d.error) for d in letters] == [(b"bad", "error", "no price")]


def _refusal(action: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as refused:  # Spark wraps it: the text counts
        action()
    return str(refused.value)


def test_bad_source_options_are_refused_at_load_by_name(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    source, _ = topics()
    with socket.socket() as probe:  # a free port: nothing listens there
        probe.bind(("127.0.0.1", 0))
        down = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"

    cases = {
        "'redis'": {"redis": "http://127.0.0.1:1", "topic": source.name},
        "did not answer": {"redis": down, "topic": source.name},
        "'topic'": {"redis": redis_server.url, "topic": "no-such-topic"},
        "'group'": {"redis": redis_server.url, "topic": source.name, "group": "nobody"},
        "'address'": {"redis": redis_server.url, "topic": source.name, "address": "127.0.0.1:1",
                      "authkey_env": "X"},
        "'lease_seconds'": {"redis": redis_server.url, "topic": source.name, "lease_seconds": "3"},
    }
    texts = {name: _refusal(lambda o=o: spark.readStream.format("actorbus").options(**o).load())
             for name, o in cases.items()}

    for name, text in texts.items():
        assert "InvalidSettingsError: invalid setting" in text, text
        assert name in text, text


def test_bad_sink_options_are_refused_at_save_by_name(
    spark: Any, redis_server: RedisServer
) -> None:
    frame = spark.createDataFrame([("a",)], "payload string")

    text = _refusal(lambda: frame.write.format("actorbus").option("redis", redis_server.url)
                    .option("topic", "no-such-topic").mode("append").save())
    both = _refusal(lambda: frame.write.format("actorbus").option("redis", redis_server.url)
                    .option("topic", "t").option("address", "127.0.0.1:1").mode("append").save())

    assert "invalid setting 'topic'" in text and "no topic 'no-such-topic'" in text
    assert "invalid setting 'address'" in both


def test_each_topic_partition_is_one_spark_partition(
    spark: Any, redis_server: RedisServer, bus: Bus, tmp_path: Path
) -> None:
    source, sink = topic_pair(bus, f"p-{uuid.uuid4().hex[:10]}", partitions=2)
    payloads = [f"m{n}".encode() for n in range(40)]
    publish_all(source, payloads)

    finish(upper_query(spark, redis_server.url, source.name, sink.name, tmp_path / "ck"))

    # One read task per source partition; each task's unkeyed rows go to its own partition
    # of the sink, so rows in both of the sink's streams mean two tasks ran.
    client = redis.Redis.from_url(redis_server.url)
    try:
        lengths = [client.xlen(TopicKeys.of(sink.name, p).stream) for p in range(2)]
    finally:
        client.close()
    assert sum(lengths) == 40 and min(lengths) > 0
    assert sorted(m.data for m in drain(sink)) == sorted(p.upper() for p in payloads)
    assert wait_until(lambda: source.stats().pending == 0, timeout=30)
    assert source.stats().delivered == 40


@pytest.mark.parametrize("counter", ["kept", "lost"])
def test_available_now_ends_at_what_the_stream_held_when_it_began(
    spark: Any, redis_server: RedisServer, topics: Any, counter: str
) -> None:
    """Planning and reading without a query: the batches of an ``availableNow`` run reach
    exactly the last entry published before the run began, whether Redis still knows the
    group's read counter (the read tasks take the entries) or lost it (``entries-read``
    nil, as after ``XGROUP SETID``: the driver takes them)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader, resolved_ends

    source, _ = topics()
    publish_all(source, [f"m{n}".encode() for n in range(30)])
    options, connection, settings, client, stream = planning(redis_server.url, source)
    reader = RedisStreamReader(options, spark.createDataFrame([], SOURCE_SCHEMA).schema, settings)
    try:
        ids = [entry_id.decode() for entry_id, _ in client.xrange(stream)]
        reader.prepareForTriggerAvailableNow()
        offsets = [reader.initialOffset()]
        offsets.append(reader.latestOffset(offsets[0], ReadMaxRows(12)))
        batches = [read_batch(reader, offsets[0], offsets[1])]

        def end() -> str:  # where the last batch ends, found once its tasks ran
            return resolved_ends(connection, source.name, "spark", options.consumer,
                                 offsets[-1])[0]

        ends = [end()]
        publish_all(source, [f"late{n}".encode() for n in range(20)])  # after the run began
        if counter == "lost":
            client.xgroup_setid(stream, "spark", ids[11])
            (group,) = client.xinfo_groups(stream)
            assert group["entries-read"] is None
        while len(offsets) < 6:
            offsets.append(reader.latestOffset(offsets[-1], ReadMaxRows(12)))
            if offsets[-1] is not offsets[-2]:
                batches.append(read_batch(reader, offsets[-2], offsets[-1]))
            ends.append(end())
        reader.stop()  # waits for the last call's ack of the batch before it
        (group,) = client.xinfo_groups(stream)
        held = client.xpending(stream, "spark")["pending"]
    finally:
        reader.stop()
        connection.close()
        client.close()
    # 12 + 12 + 6, then nothing more: the run ends at the 30th entry, and each call acked
    # the batch before it
    assert [[[row[0] for row in part] for part in batch] for batch in batches] == [
        [ids[:12]], [ids[12:24]], [ids[24:30]]]
    assert ends == [ids[11], ids[23], ids[29], ids[29], ids[29]]
    assert (group["last-delivered-id"].decode(), held) == (ids[29], 0)


def read_batch(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[list[tuple[Any, ...]]]:
    """Run a planned batch's read tasks as Spark does (each on its own connection): per
    task, its rows as (message_id, payload, attempt)."""
    return [[(row["message_id"], row["payload"], row["attempt"]) for batch in reader.read(part)
             for row in batch.to_pylist()] for part in reader.partitions(start, end)]


def planning(url: str, source: Any) -> tuple[Any, Any, Any, Any, str]:
    """What planning without a query needs on ``source``'s group "spark": its parsed
    options, a connection, the topic's recorded settings, a plain client and the stream
    of partition 0 (the caller closes both connections)."""
    from runtime.spark._options import RedisSourceOptions

    options = RedisSourceOptions.parse({"redis": url, "topic": source.name, "group": "spark"})
    connection = options.connect()
    settings = options.check(connection, "spark")
    return options, connection, settings, redis.Redis.from_url(url), TopicKeys.of(source.name).stream


def test_stop_acks_the_last_committed_batch_and_leaves_the_rest(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    """A committed batch is acked by the next plan or, for the last one, by ``stop``; a
    batch Spark read but did not commit stays pending for the next run."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader

    source, _ = topics()
    publish_all(source, [f"m{n}".encode() for n in range(25)])
    options, connection, settings, client, stream = planning(redis_server.url, source)
    schema = spark.createDataFrame([], SOURCE_SCHEMA).schema
    try:
        first_run = RedisStreamReader(options, schema, settings)
        begin = first_run.initialOffset()
        first = first_run.latestOffset(begin, ReadMaxRows(10))
        first_rows = read_batch(first_run, begin, first)
        first_run.commit(first)
        first_run.stop()  # no later plan: stop acks the committed batch
        after_first = (client.xpending(stream, "spark")["pending"], source.stats().delivered)
        second_run = RedisStreamReader(options, schema, settings)
        second = second_run.latestOffset(first, ReadMaxRows(10))
        second_rows = read_batch(second_run, first, second)  # read, never committed
        second_run.stop()
        after_second = (client.xpending(stream, "spark")["pending"], source.stats().delivered)
    finally:
        connection.close()
        client.close()
    assert [[row[1] for row in part] for part in first_rows + second_rows] == [
        [f"m{n}".encode() for n in range(10)], [f"m{n}".encode() for n in range(10, 20)]]
    assert after_first == (0, 10)
    assert after_second == (10, 10)


def test_a_batch_limit_left_by_a_short_partition_goes_to_the_others(
    spark: Any, redis_server: RedisServer, bus: Bus
) -> None:
    """``max_messages_per_batch`` bounds the whole batch: a partition holding less than
    its share leaves the rest to the partitions that hold more."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.redis._keys import partition_of
    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader

    source = bus.create_topic(f"short-{uuid.uuid4().hex[:10]}", backend="redis", partitions=2)
    source.create_group("spark")
    keys = {partition_of(f"k{n}", 2): f"k{n}" for n in range(10)}
    for n in range(40):  # 30 in partition 0, 10 in partition 1
        source.publish(f"m{n}".encode(), key=keys[0] if n % 4 else keys[1])
    options, connection, settings, client, _ = planning(redis_server.url, source)
    schema = spark.createDataFrame([], SOURCE_SCHEMA).schema
    reader = RedisStreamReader(options, schema, settings)
    try:
        begin = reader.initialOffset()
        end = reader.latestOffset(begin, ReadMaxRows(36))
        read = [[row[1] for row in part] for part in read_batch(reader, begin, end)]
        held = [client.xpending(TopicKeys.of(source.name, p).stream, "spark")["pending"]
                for p in range(2)]
    finally:
        reader.stop()
        connection.close()
        client.close()
    assert [take[0] for take in end["take"]] == [26, 10]  # shares of 18: partition 1 had
    assert held == [26, 10]                                # 10, its 8 went to partition 0
    assert read == [[f"m{n}".encode() for n in range(40) if n % 4][:26],
                    [f"m{n}".encode() for n in range(0, 40, 4)]]


def test_a_read_task_takes_the_same_entries_on_every_attempt(
    spark: Any, redis_server: RedisServer, topics: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning and reading without a query: a batch's read task takes its entries
    itself, and every attempt gets the same rows: one stopped before it recorded its end,
    one run beside it slice by slice, and one after the record (which reads what the
    consumer holds). Once another consumer reads the group, the driver takes the next
    batch, past what that consumer took."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis import _source
    from runtime.spark.redis._source import RedisStreamReader, resolved_ends

    monkeypatch.setattr(_source, "SLICE_ROWS", 5)  # a task of 12 takes 3 slices
    schema = spark.createDataFrame([], SOURCE_SCHEMA).schema
    source, _ = topics()
    publish_all(source, [f"m{n}".encode() for n in range(40)])
    options, connection, settings, client, stream = planning(redis_server.url, source)
    ids = [entry_id.decode() for entry_id, _ in client.xrange(stream)]

    def rows(batches: Iterator[Any]) -> list[tuple[Any, ...]]:
        return [(r["message_id"], r["payload"], r["attributes"], r["attempt"])
                for batch in batches for r in batch.to_pylist()]

    try:
        reader = RedisStreamReader(options, schema, settings)
        begin = reader.initialOffset()
        first = reader.latestOffset(begin, ReadMaxRows(12))
        (task,) = reader.partitions(begin, first)
        stopped = reader.read(task)
        stopped_rows = rows(iter([next(stopped)]))
        stopped.close()  # failed after its first slice: no record
        beside = reader.read(task)
        beside_rows = rows(iter([next(beside)]))  # and its next slice, taken in advance
        whole = rows(reader.read(task))  # a second attempt while the first still runs
        beside_rows += rows(beside)
        again = rows(reader.read(task))  # after the record
        pending = client.xpending(stream, "spark")["pending"]
        client.xreadgroup("spark", "other", {stream: ">"}, count=5)  # ids[12:17]
        second = reader.latestOffset(first, ReadMaxRows(12))
        second_rows = rows(reader.read(reader.partitions(first, second)[0]))
        ends = resolved_ends(connection, source.name, "spark", options.consumer, second)
        reader.stop()
    finally:
        connection.close()
        client.close()
    assert first["ids"] == [""] and first["take"][0][0] == 12
    assert [r[0] for r in whole] == ids[:12]
    assert [r[1] for r in whole] == [f"m{n}".encode() for n in range(12)]
    assert [r[2] for r in whole[:2]] == [[("n", "0")], [("n", "1")]]
    assert stopped_rows == whole[:5] and beside_rows == whole and again == whole
    assert pending == 12
    assert "take" not in second and [r[0] for r in second_rows] == ids[17:29]
    assert {r[3] for r in whole + second_rows} == {1}
    assert ends == [ids[28]]


def test_a_read_task_skips_replays_meant_for_another_group(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    """A dead letter replayed to another group of the topic is acked, not read; one
    replayed to this group is read under its message id; a second attempt of the task
    reads the same rows from what the consumer holds."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader

    schema = spark.createDataFrame([], SOURCE_SCHEMA).schema
    source, _ = topics()
    source.create_group("other")
    publish_all(source, [f"m{n}".encode() for n in range(10)])
    options, connection, settings, client, stream = planning(redis_server.url, source)
    keys = TopicKeys.of(source.name)
    entries = client.xrange(stream)
    ids = [entry_id.decode() for entry_id, _ in entries]
    for group, n in (("other", 3), ("spark", 5)):  # as topic.replay() writes them
        fields = entries[n][1]
        connection.run("REPLAY", [keys.stream, keys.groups, keys.stats], [
            group, ids[n], fields[b"b"], fields[b"f"], fields[b"k"], fields[b"a"]])
    try:
        reader = RedisStreamReader(options, schema, settings)
        begin = reader.initialOffset()
        end = reader.latestOffset(begin, ReadMaxRows(100))
        first = read_batch(reader, begin, end)
        again = read_batch(reader, begin, end)
        held = client.xpending(stream, "spark")["pending"]
        reader.stop()
    finally:
        connection.close()
        client.close()
    assert end["take"][0][0] == 12
    assert [[r[:2] for r in part] for part in first] == [
        [(ids[n], f"m{n}".encode()) for n in range(10)] + [(ids[5], b"m5")]]
    assert again == first
    assert held == 11


def test_entries_held_from_an_earlier_run_are_taken_on_the_driver_and_read_first(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    """A run that starts while the consumer holds entries from an earlier one (read,
    never committed) takes them first on the driver, then new ones, looked up in the
    pending list past what another consumer holds; an offset from before ``after``
    existed reads the same rows."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader

    schema = spark.createDataFrame([], SOURCE_SCHEMA).schema
    source, _ = topics()
    publish_all(source, [f"m{n}".encode() for n in range(40)])
    options, connection, settings, client, stream = planning(redis_server.url, source)
    ids = [entry_id.decode() for entry_id, _ in client.xrange(stream)]
    try:
        earlier = RedisStreamReader(options, schema, settings)
        begin = earlier.initialOffset()
        first = earlier.latestOffset(begin, ReadMaxRows(12))
        read_batch(earlier, begin, first)
        client.xreadgroup("spark", "other", {stream: ">"}, count=5)  # ids[12:17]
        second = earlier.latestOffset(first, ReadMaxRows(12))  # acks the first batch
        read_batch(earlier, first, second)
        earlier.stop()  # the second batch was never committed: it stays held
        held_run = RedisStreamReader(options, schema, settings)
        start = held_run.initialOffset()
        third = held_run.latestOffset(start, ReadMaxRows(20))
        third_rows = read_batch(held_run, start, third)
        old_style = read_batch(held_run, {"ids": ["0-0"], "redis": third["redis"]},
                               {"ids": third["ids"], "redis": third["redis"]})
        held_run.stop()
    finally:
        connection.close()
        client.close()
    # the second batch's 12 (held, never committed), then 8 new entries
    assert "take" not in third and third["from"] == [""]
    assert [[r[0] for r in part] for part in third_rows] == [ids[17:37]]
    assert old_style == third_rows


@pytest.mark.parametrize(("counts", "rows"), [
    ([20, 20, 20], [4, 3, 3]), ([20, 20, 1], [5, 4, 1]), ([3, 0, 50], [3, 0, 7])])
def test_a_batch_the_driver_takes_holds_at_most_the_limit(
    spark: Any, redis_server: RedisServer, topics: Any, counts: list[int], rows: list[int]
) -> None:
    """With another consumer in the group the driver takes the batch: the limit is split
    over the partitions, what a short one leaves goes to the others, and the batch never
    holds more than the limit."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.redis._keys import partition_of
    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader

    source, _ = topics(partitions=3)
    keys = {partition_of(f"k{n}", 3): f"k{n}" for n in range(30)}
    for p, count in enumerate(counts):
        for n in range(count):
            source.publish(f"p{p}-{n}".encode(), key=keys[p])
    options, connection, settings, client, _ = planning(redis_server.url, source)
    for p in range(3):  # a member of the group that holds nothing
        client.xgroup_createconsumer(TopicKeys.of(source.name, p).stream, "spark", "other")
    reader = RedisStreamReader(options, spark.createDataFrame([], SOURCE_SCHEMA).schema, settings)
    try:
        begin = reader.initialOffset()
        end = reader.latestOffset(begin, ReadMaxRows(10))
        read = read_batch(reader, begin, end)
    finally:
        reader.stop()
        connection.close()
        client.close()

    assert "take" not in end
    by_partition = dict.fromkeys(range(3), 0) | {
        int(part[0][1].decode().split("-")[0][1:]): len(part) for part in read}
    assert [by_partition[p] for p in range(3)] == rows


def test_a_retried_read_task_dead_letters_an_undecodable_entry_once(
    spark: Any, redis_server: RedisServer, topics: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read task that stopped after burying an entry it cannot read, then retried,
    takes the entry again and only acks it: one dead letter, counted once."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis import _source
    from runtime.spark.redis._source import RedisStreamReader

    monkeypatch.setattr(_source, "SLICE_ROWS", 3)
    source, _ = topics()
    source.publish(b"a")
    options, connection, settings, client, stream = planning(redis_server.url, source)
    keys = TopicKeys.of(source.name)
    client.xadd(stream, {"b": b"\x80junk", "f": "p"})  # a body no unpickler accepts
    client.hincrby(keys.stats, "pending", 1)
    for n in range(6):
        source.publish(f"m{n}".encode())
    reader = RedisStreamReader(options, spark.createDataFrame([], SOURCE_SCHEMA).schema, settings)
    try:
        begin = reader.initialOffset()
        end = reader.latestOffset(begin, ReadMaxRows(100))
        (task,) = reader.partitions(begin, end)
        stopped = reader.read(task)
        first_rows = [row["payload"] for row in next(stopped).to_pylist()]
        stopped.close()  # failed after its first slice, which buried the entry
        rows = [row["payload"] for batch in reader.read(task) for row in batch.to_pylist()]
        reader.commit(end)
    finally:
        reader.stop()
        letters = client.xlen(keys.dead)
        connection.close()
        client.close()
    stats = source.stats()

    assert first_rows == [b"a", b"m0"]
    assert rows == [b"a"] + [f"m{n}".encode() for n in range(6)]
    assert (letters, stats.nacked, stats.dead_lettered, stats.delivered, stats.pending) == (
        1, 1, 1, 7, 0)


def test_a_read_task_attempt_that_resumes_after_the_commit_takes_nothing(
    spark: Any, redis_server: RedisServer, topics: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt of a read task (a speculative one) that takes its next slice only after
    its batch was committed and the next one planned fails and takes nothing: the group
    is not set back, and the later batches read every entry once. (Spark plans a batch,
    then tells the source the one before was committed.)"""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis import _source
    from runtime.spark.redis._source import RedisStreamReader

    monkeypatch.setattr(_source, "SLICE_ROWS", 3)  # a batch of 10 takes 4 slices
    source, _ = topics()
    for n in range(30):
        source.publish(f"m{n}".encode())
    options, connection, settings, client, stream = planning(redis_server.url, source)
    ids = [entry_id.decode() for entry_id, _ in client.xrange(stream)]

    def position() -> str:
        (group,) = client.xinfo_groups(stream)
        return str(group["last-delivered-id"].decode())

    def payloads(batch: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
        return [row[1] for part in read_batch(reader, batch, end) for row in part]

    reader = RedisStreamReader(options, spark.createDataFrame([], SOURCE_SCHEMA).schema, settings)
    try:
        begin = reader.initialOffset()
        first = reader.latestOffset(begin, ReadMaxRows(10))
        (task,) = reader.partitions(begin, first)
        late = reader.read(task)
        next(late)  # its first slice, and the second taken in advance
        assert wait_until(lambda: position() == ids[5], timeout=30)
        first_rows = payloads(begin, first)
        second = reader.latestOffset(first, ReadMaxRows(10))
        reader.commit(first)
        second_rows = payloads(first, second)
        with pytest.raises(RuntimeError, match="committed already"):
            list(late)  # its third slice comes after the next plan
        after_late = position()
        third = reader.latestOffset(second, ReadMaxRows(10))
        reader.commit(second)
        third_rows = payloads(second, third)
        reader.commit(third)
    finally:
        late.close()
        reader.stop()
        held = client.xpending(stream, "spark")["pending"]
        connection.close()
        client.close()

    assert after_late == ids[19]
    assert first_rows + second_rows + third_rows == [f"m{n}".encode() for n in range(30)]
    assert "take" in third and (held, source.stats().delivered) == (0, 30)


def test_a_destroyed_topic_fails_the_next_plan_by_name(
    spark: Any, redis_server: RedisServer, topics: Any
) -> None:
    """A topic destroyed while a query reads it: the next plan fails naming ``topic``,
    and ``stop`` returns (nothing is left to ack)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from runtime.errors import InvalidSettingsError
    from runtime.spark._arrow import SOURCE_SCHEMA
    from runtime.spark.redis._source import RedisStreamReader

    source, _ = topics()
    publish_all(source, [f"m{n}".encode() for n in range(6)])
    options, connection, settings, client, _ = planning(redis_server.url, source)
    reader = RedisStreamReader(options, spark.createDataFrame([], SOURCE_SCHEMA).schema, settings)
    try:
        begin = reader.initialOffset()
        first = reader.latestOffset(begin, ReadMaxRows(4))
        read_batch(reader, begin, first)
        reader.commit(first)
        source.destroy()
        with pytest.raises(InvalidSettingsError) as refused:
            reader.latestOffset(first, ReadMaxRows(4))
        reader.stop()
        left = client.keys(f"*{source.name}*")
    finally:
        connection.close()
        client.close()

    assert refused.value.setting == "topic"
    assert left == []


@pytest.fixture(scope="module")
def redis_cluster(redis_server: RedisServer) -> Iterator[RedisClusterNodes]:
    """A 3-master Redis Cluster of this module's own (stopped by its pids)."""
    if REDIS_CLI is None:
        pytest.skip(SKIP_CLUSTER_REASON)
    with started_cluster() as cluster:
        yield cluster


def test_a_stream_between_topics_on_a_redis_cluster_writes_every_row_once(
    spark: Any, redis_cluster: RedisClusterNodes, tmp_path: Path
) -> None:
    """``option("redis", "redis+cluster://...")`` on both sides: a source and a sink of 3
    partitions each, each topic's partitions on more than one master."""
    from redis.cluster import RedisCluster

    client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    try:
        while True:  # both topics' partitions on more than one master
            name = f"c-{uuid.uuid4().hex[:10]}"
            if all(len({int(client.get_node_from_key(TopicKeys.of(f"{name}-{side}", p).stream).port)
                        for p in range(3)}) >= 2 for side in ("in", "out")):
                break
    finally:
        client.close()
    with Bus(redis=redis_cluster.url) as bus:
        source, sink = topic_pair(bus, name, partitions=3)
        payloads = [f"m{n}".encode() for n in range(90)]
        publish_all(source, payloads)

        finish(upper_query(spark, redis_cluster.url, source.name, sink.name, tmp_path / "ck",
                           max_messages_per_batch=40))

        out = drain(sink)
        assert sorted(m.data for m in out) == sorted(p.upper() for p in payloads)
        assert {m.ordering_key for m in out if m.data == b"M1"} == {"k1"}
        assert wait_until(lambda: source.stats().pending == 0, timeout=30)
        assert (source.stats().delivered, sink.stats().published) == (90, 90)
