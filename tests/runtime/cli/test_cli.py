"""The ``actorbus`` CLI, run in-process through ``main(argv)`` (a subprocess for serve + SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime import Bus
from runtime.cli import _remote as cli_remote
from runtime.cli._main import main
from runtime.cli._topics_file import TopicsFileError, load_topics

KEY_ENV = "ACTORBUS_CLI_TEST_KEY"
KEY = "cli-test-secret"
TOPICS = """\
[defaults]
ack_timeout = 5.0

[topics.orders]
max_pending = 100
groups = ["billing", "analytics"]

[topics.revenue]
"""


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY.encode()


@pytest.fixture
def served(key: bytes) -> Iterator[tuple[Bus, str]]:
    """A bus with topic 'orders' served on loopback; yields it and its 'host:port'."""
    with Bus() as bus:
        bus.create_topic("orders").create_group("billing")
        server = bus.serve(("127.0.0.1", 0), authkey=key)
        yield bus, f"{server.address[0]}:{server.address[1]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("actorbus: error: ")
    return lines[0]


@pytest.mark.parametrize("command", [[], ["demo"], ["serve"], ["stats"], ["dlq"]])
def test_help_exits_zero_and_describes_the_command(command: list[str], capsys: Any) -> None:
    code = main([*command, "--help"])

    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"usage: actorbus {' '.join(command)}".rstrip())
    assert "--help" in out


def test_no_command_is_one_line_and_exit_two(capsys: Any) -> None:
    code = main([])

    assert code == 2
    assert "required: COMMAND" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv", [["demo", "--messages", "0"], ["demo", "--workers", "two"], ["fly"]])
def test_bad_arguments_are_one_line_and_exit_two(argv: list[str], capsys: Any) -> None:
    code = main(argv)

    assert code == 2
    assert "see 'actorbus" in one_error_line(capsys.readouterr().err)


def test_demo_without_spark_adds_up_and_exits_zero(capsys: Any) -> None:
    code = main(["demo", "--no-spark", "--messages", "300", "--workers", "1"])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "Spark stage skipped: --no-spark was given" in out
    assert "orders published" in out and "300" in out
    assert "nack: invalid amount" in out and "nack: unknown currency" in out
    assert "all counts add up" in out


def test_stats_without_the_key_variable_says_which_to_set(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)

    code = main(["stats", "--authkey-env", KEY_ENV])

    assert code == 2
    assert f"export {KEY_ENV}=" in one_error_line(capsys.readouterr().err)


def test_stats_of_an_unreachable_broker_is_one_line(key: bytes, capsys: Any) -> None:
    code = main(["stats", "--address", f"127.0.0.1:{free_port()}", "--authkey-env", KEY_ENV])

    assert code == 1
    assert "cannot reach the broker" in one_error_line(capsys.readouterr().err)


def test_stats_with_a_bad_address_is_one_line(key: bytes, capsys: Any) -> None:
    code = main(["stats", "--address", "localhost", "--authkey-env", KEY_ENV])

    assert code == 2
    assert "HOST:PORT" in one_error_line(capsys.readouterr().err)


def test_stats_json_reports_the_served_topics(served: tuple[Bus, str], capsys: Any) -> None:
    bus, address = served
    bus.publish("orders", "waiting")

    code = main(["stats", "--address", address, "--authkey-env", KEY_ENV, "--json"])

    stats = json.loads(capsys.readouterr().out)
    assert code == 0
    assert stats["orders"]["published"] == 1 and stats["orders"]["pending"] == 1


def test_stats_table_names_every_topic(served: tuple[Bus, str], capsys: Any) -> None:
    code = main(["stats", "--address", served[1], "--authkey-env", KEY_ENV])

    out = capsys.readouterr().out
    assert code == 0
    assert "orders" in out and "published" in out


def test_stats_with_a_wrong_key_is_one_line(served: tuple[Bus, str], monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv(KEY_ENV, "not-the-key")

    code = main(["stats", "--address", served[1], "--authkey-env", KEY_ENV])

    assert code == 2
    assert "refused the key" in one_error_line(capsys.readouterr().err)


def test_dlq_of_an_unknown_topic_is_one_line(served: tuple[Bus, str], capsys: Any) -> None:
    code = main(["dlq", "nope", "--address", served[1], "--authkey-env", KEY_ENV])

    assert code == 1
    assert "nope" in one_error_line(capsys.readouterr().err)


@pytest.mark.skipif(not hasattr(runtime.RemoteBus, "dead_letters"),
                    reason="RemoteBus.dead_letters (broker dead-letter operations) is not in this build")
def test_dlq_lists_drains_and_replays_on_a_real_broker(served: tuple[Bus, str], capsys: Any) -> None:
    bus, address = served
    orders = bus.topic("orders")
    billed: list[tuple[str, int]] = []
    audited: list[str] = []
    orders.subscribe(lambda d: (billed.append((d.message, d.attempt)), d.nack("bad order")),
                     group="billing")
    orders.subscribe(lambda d: (audited.append(d.message), d.ack()))
    bus.publish("orders", "o-1")
    assert orders.join(timeout=10)
    endpoint = ["--address", address, "--authkey-env", KEY_ENV]

    assert main(["dlq", "orders", *endpoint]) == 0
    assert "listed 1 dead letter(s) of orders" in capsys.readouterr().out
    assert main(["dlq", "orders", "--replay", *endpoint]) == 0
    assert "replayed 1" in capsys.readouterr().out
    assert orders.join(timeout=10)
    assert (billed, audited) == ([("o-1", 1), ("o-1", 2)], ["o-1"])  # only billing again
    assert main(["dlq", "orders", "--drain", *endpoint]) == 0
    assert "drained 1" in capsys.readouterr().out
    assert len(orders.dead_letters) == 0


class FakeQueue:
    def __init__(self, letters: list[runtime.DeadLetter]) -> None:
        self.letters = letters
        self.replayed = 0

    def __iter__(self) -> Iterator[runtime.DeadLetter]:
        return iter(list(self.letters))

    def drain(self) -> list[runtime.DeadLetter]:
        drained, self.letters = self.letters, []
        return drained

    def replay(self) -> int:
        self.replayed, self.letters = len(self.letters), []
        return self.replayed


class FakeRemote:
    def __init__(self, queue: FakeQueue) -> None:
        self.queue = queue

    def __enter__(self) -> FakeRemote:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def topic(self, name: str) -> object:
        return object()

    def dead_letters(self, name: str) -> FakeQueue:
        return self.queue


def letter(n: int) -> runtime.DeadLetter:
    return runtime.DeadLetter(
        message=runtime.Message(data=b"order %d" % n), message_id=str(n), topic="orders",
        subscriber_id=1, group="billing", reason="nack", error="bad order", attempts=1, at=0.0)


@pytest.mark.parametrize(("flag", "expected", "left"), [
    ([], "listed 2 dead letter(s) of orders", 2),
    (["--drain"], "drained 2 dead letter(s) of orders", 0),
    (["--replay"], "replayed 2 dead letter(s) of orders", 0),
])
def test_dlq_lists_drains_or_replays_through_the_client(
    flag: list[str], expected: str, left: int, key: bytes, monkeypatch: Any, capsys: Any,
) -> None:
    queue = FakeQueue([letter(1), letter(2)])
    monkeypatch.setattr(cli_remote, "connect_remote", lambda address, authkey: FakeRemote(queue))

    code = main(["dlq", "orders", *flag, "--authkey-env", KEY_ENV])

    out = capsys.readouterr().out
    assert code == 0
    assert expected in out
    assert len(queue.letters) == left
    if not flag:
        assert "order 1" in out and "bad order" in out


def test_dlq_drain_and_replay_are_exclusive(capsys: Any) -> None:
    code = main(["dlq", "orders", "--drain", "--replay"])

    assert code == 2
    assert "not allowed with" in one_error_line(capsys.readouterr().err)


def test_bench_passes_its_arguments_to_the_benchmarks(monkeypatch: Any) -> None:
    import benchmarks

    seen: list[list[str]] = []
    monkeypatch.setattr(benchmarks, "main", lambda argv, prog: seen.append([prog, *argv]) or 0)

    assert main(["bench", "--quick", "--json"]) == 0
    assert seen == [["actorbus bench", "--quick", "--json"]]


def test_topics_file_builds_topics_with_settings_and_groups(tmp_path: Path) -> None:
    path = tmp_path / "topics.toml"
    path.write_text(TOPICS)

    with load_topics(path).build() as bus:
        assert bus.topics() == ["orders", "revenue"]
        assert bus.topic("orders").groups() == ["billing", "analytics"]
        assert bus.topic("orders").settings.max_pending == 100
        assert bus.topic("revenue").settings.ack_timeout == 5.0


@pytest.mark.parametrize(("text", "message"), [
    ("[topics.orders]\nmax_pendign = 3\n", "unknown setting(s) ['max_pendign']"),
    ("[topics.orders]\ngroups = 'billing'\n", "groups must be a list"),
    ("[defaults]\nack_timeout = 1.0\n", "no topics"),
    ("[topics.orders\n", "not valid TOML"),
    ("[queues.orders]\n", "unknown table(s) ['queues']"),
])
def test_topics_file_mistakes_name_the_problem(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "topics.toml"
    path.write_text(text)

    with pytest.raises(TopicsFileError) as caught:
        load_topics(path)

    assert message in str(caught.value)


def test_serve_with_an_out_of_range_setting_is_one_line(tmp_path: Path, key: bytes, capsys: Any) -> None:
    path = tmp_path / "topics.toml"
    path.write_text("[topics.orders]\nbalanced_capacity = 0\n")

    code = main(["serve", str(path), "--address", "127.0.0.1:0", "--authkey-env", KEY_ENV])

    assert code == 1
    assert "balanced_capacity" in one_error_line(capsys.readouterr().err)


def test_serve_runs_a_broker_with_metrics_and_stops_on_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "topics.toml"
    path.write_text(TOPICS)
    env = {**os.environ, KEY_ENV: KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli._main", "serve", str(path), "--address", "127.0.0.1:0",
         "--authkey-env", KEY_ENV, "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        banner = proc.stdout.readline() if proc.stdout else ""
        assert "serving 2 topic(s) on 127.0.0.1:" in banner, proc.stderr.read() if proc.stderr else ""
        broker = banner.split(" on ")[1].split(",")[0]
        metrics = banner.split("metrics on ")[1].strip()
        with runtime.connect(broker, authkey=KEY.encode()) as remote:
            remote.topic("orders").publish("o-1")
            assert remote.topics() == ["orders", "revenue"]
        with urllib.request.urlopen(metrics, timeout=10) as response:
            assert 'actorbus_topic_pending{topic="orders"} 1.0' in response.read().decode()

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 0, err
    assert "broker stopped" in out
    assert "Traceback" not in err


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_demo_with_spark_aggregates_revenue_and_adds_up(tmp_path: Path) -> None:
    from support.spark import MISSING

    if MISSING is not None:
        pytest.skip(MISSING)

    # A subprocess: PySpark's JVM gateway (and its threads) live as long as the interpreter.
    result = subprocess.run(
        [sys.executable, "-m", "runtime.cli._main", "demo", "--messages", "300", "--workers", "1"],
        capture_output=True, text=True, timeout=280, cwd=tmp_path)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "revenue  customer-" in result.stdout
    assert "Spark rows in (orders)" in result.stdout
    assert "revenue matches the orders" in result.stdout
    assert "all counts add up" in result.stdout
    # The last batch's ack reached the broker before it closed (no warning about it).
    assert "could not ack" not in result.stdout + result.stderr
