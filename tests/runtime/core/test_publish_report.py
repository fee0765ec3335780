"""The report of a lone ``topic.publish`` (built without the dataclass's __init__) is an
ordinary, frozen `PublishReport`."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from runtime import Bus, Outcome, PublishReport


def test_a_lone_publish_reports_like_the_dataclass(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    topic.subscribe(lambda d: d.ack(), group="billing")

    report = topic.publish("o-1")

    assert type(report) is PublishReport
    assert report == PublishReport(report.message_id, {"billing": "enqueued"}, 0, report.outcome)
    assert dataclasses.asdict(report)["balanced"] == {"billing": "enqueued"}
    assert report.outcome.result(timeout=5) == Outcome(acked=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.message_id = "other"  # type: ignore[misc]


def test_a_lone_publish_report_copies_and_pickles_like_one_built_by_hand(bus: Bus) -> None:
    topic = bus.create_topic("orders")
    topic.create_group("billing")

    report = topic.publish("o-1")
    copied = dataclasses.replace(report, broadcast=3)

    assert (copied.message_id, copied.balanced, copied.broadcast) == (
        report.message_id, {"billing": "enqueued"}, 3)
    assert copied.outcome is report.outcome
    bare = dataclasses.replace(report, outcome=None)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(bare)) == PublishReport(
        report.message_id, {"billing": "enqueued"}, 0, None)  # type: ignore[arg-type]
