"""The command line on Redis topics: ``demo --redis``, ``stats --redis``, ``dlq --redis``."""

from __future__ import annotations

from typing import Any

from runtime import Bus
from runtime.cli._main import main


def test_demo_on_redis_adds_up_and_leaves_no_topic_behind(redis_url: str, capsys: Any) -> None:
    code = main(["demo", "--redis", redis_url, "--messages", "200", "--workers", "1"])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "all counts add up" in out
    assert "not --redis" in out
    assert main(["stats", "--redis", redis_url, "--json"]) == 0
    assert "actorbus-demo-" not in capsys.readouterr().out


def test_stats_and_dlq_read_a_topic_another_process_declared(redis_url: str, topic_name: str,
                                                             capsys: Any) -> None:
    with Bus(redis=redis_url) as bus:
        topic = bus.create_topic(topic_name, backend="redis", max_delivery_attempts=1)
        pull = topic.subscription(group="g")
        report = topic.publish("refused")
        pull.receive(timeout=10).nack("bad")

        assert main(["stats", "--redis", redis_url]) == 0
        listed = capsys.readouterr().out
        assert main(["dlq", topic_name, "--redis", redis_url, "--replay"]) == 0
        replayed = capsys.readouterr().out
        again = pull.receive(timeout=10)
        again.ack()

        assert topic_name in listed
        assert "replayed 1 dead letter(s)" in replayed
        assert (again.message, again.message_id) == ("refused", report.message_id)
        assert topic.join(timeout=10) is True
        assert len(topic.dead_letters) == 0
        topic.destroy()


def test_dlq_of_an_unknown_redis_topic_is_one_line(redis_url: str, capsys: Any) -> None:
    code = main(["dlq", "no-such-topic", "--redis", redis_url])

    assert code == 1
    assert "not found" in capsys.readouterr().err
