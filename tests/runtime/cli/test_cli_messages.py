"""What the CLI says when the user gets something wrong (issue 15 items 6 and 8)."""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from runtime import Bus
from runtime.cli._main import main
from runtime.cli._topics_file import TopicsFileError, load_topics

KEY_ENV = "ACTORBUS_CLI_MESSAGES_KEY"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "secret")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.fixture
def topics_file(tmp_path: Path) -> Path:
    path = tmp_path / "topics.toml"
    path.write_text("[topics.orders]\n")
    return path


def _error_line(capsys: Any) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_version_prints_the_installed_version(capsys: Any) -> None:
    assert main(["--version"]) == 0

    assert capsys.readouterr().out.strip() == f"actorbus {metadata.version('actorbus')}"


def test_bench_help_names_actorbus_bench(capsys: Any) -> None:
    assert main(["bench", "--help"]) == 0

    assert "usage: actorbus bench" in capsys.readouterr().out


def test_a_taken_broker_port_is_named(taken_port: int, topics_file: Path, capsys: Any) -> None:
    code = main(["serve", str(topics_file), "--address", f"127.0.0.1:{taken_port}",
                 "--authkey-env", KEY_ENV])

    assert code != 0
    line = _error_line(capsys)
    assert f"127.0.0.1:{taken_port}" in line and "broker" in line and "in use" in line


def test_a_taken_metrics_port_is_named(taken_port: int, topics_file: Path, capsys: Any) -> None:
    code = main(["serve", str(topics_file), "--address", "127.0.0.1:0",
                 "--metrics-port", str(taken_port), "--authkey-env", KEY_ENV])

    assert code != 0
    line = _error_line(capsys)
    assert f"127.0.0.1:{taken_port}" in line and "metrics" in line and "in use" in line


def test_a_bad_value_in_a_topics_file_names_the_file_the_topic_and_the_setting(
    tmp_path: Path, capsys: Any,
) -> None:
    path = tmp_path / "topics.toml"
    path.write_text("[topics.orders]\n[topics.billing]\nmax_pending = -5\n")

    with pytest.raises(TopicsFileError) as info:
        load_topics(path)
    code = main(["serve", str(path), "--address", "127.0.0.1:0", "--authkey-env", KEY_ENV])

    text = str(info.value)
    assert str(path) in text and "[topics.billing]" in text and "max_pending" in text
    assert "-5" in text
    assert code != 0 and _error_line(capsys) == f"actorbus: error: {text}"


def test_documented_topics_file_takes_a_remote_publishers_burst_before_consumers_attach() -> None:
    page = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    toml = page.split("## The topics file")[1].split("```toml\n")[1].split("```")[0]
    spec = load_topics_text(toml)

    with spec.build() as bus:
        orders = bus.topic("orders")
        for n in range(5_000):
            orders.publish(b"%d" % n, timeout=5)  # nobody consumes yet: no WouldBlock
        stats = orders.stats()
    assert (stats.published, stats.pending) == (5_000, 5_000)


def load_topics_text(text: str) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "topics.toml"
        path.write_text(text)
        return load_topics(path)


def test_stats_names_the_full_group_that_holds_publishers(capsys: Any) -> None:
    with Bus() as bus:
        orders = bus.create_topic("orders", balanced_capacity=3)
        orders.create_group("billing")
        for n in range(3):
            orders.publish(n)
        server = bus.serve(("127.0.0.1", 0), authkey=b"secret")
        endpoint = ["--address", f"127.0.0.1:{server.address[1]}", "--authkey-env", KEY_ENV]

        assert main(["stats", *endpoint]) == 0
        table = capsys.readouterr().out
        assert main(["stats", "--json", *endpoint]) == 0
        document = json.loads(capsys.readouterr().out)

    expected = "group 'billing' of topic 'orders' is full (3 messages waiting, balanced_capacity 3)"
    assert f"held: {expected}" in table
    assert document["orders"]["held_by"] == expected
    assert document["orders"]["pending"] == 3


def test_dlq_names_the_exception_a_handler_raised(capsys: Any) -> None:
    def handler(delivery: Any) -> None:
        raise KeyError("sku")

    with Bus() as bus:
        orders = bus.create_topic("orders")
        orders.subscribe(handler, group="billing")
        orders.publish("o-1").outcome.result(timeout=5)
        server = bus.serve(("127.0.0.1", 0), authkey=b"secret")
        endpoint = ["--address", f"127.0.0.1:{server.address[1]}", "--authkey-env", KEY_ENV]

        assert main(["dlq", "orders", *endpoint]) == 0

    assert "KeyError:" in capsys.readouterr().out  # the table may wrap the text after it


class Unlisted:
    """A class the broker does not allow: its dead letters cannot cross."""


def test_a_drain_that_cannot_cross_says_so_and_removes_nothing(capsys: Any) -> None:
    with Bus() as bus:
        orders = bus.create_topic("orders", ack_timeout=None)
        orders.subscribe(lambda d: d.nack("no"), group="billing")
        orders.publish("fine")
        orders.publish(Unlisted())
        assert orders.join(timeout=5)
        with bus.serve(("127.0.0.1", 0), authkey="secret") as server:
            address = f"{server.address[0]}:{server.address[1]}"

            code = main(["dlq", "orders", "--drain", "--address", address, "--authkey-env", KEY_ENV])

        line = _error_line(capsys)
        assert code == 2
        assert "nothing was drained" in line and "Unlisted" in line
        assert len(orders.dead_letters) == 2

