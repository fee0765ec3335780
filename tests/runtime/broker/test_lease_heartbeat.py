"""A lease heartbeat keeps the deliveries a consumer holds (issue 17, item 3)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from runtime import Bus
from runtime.broker.lease._log import LeaseLog


def _log(topic: Any, lease_seconds: float, lease_member: bool = False) -> LeaseLog:
    def subscribe() -> Any:
        if lease_member:  # the broker's: whole hand-overs
            return topic._lease_member("spark", 16)
        return topic.subscription(group="spark")

    return LeaseLog(subscribe=subscribe, reject=lambda delivery, error: delivery.nack(error),
                    lease_seconds=lease_seconds)


@pytest.mark.parametrize("lease_member", [False, True], ids=["pull-member", "lease-member"])
def test_heartbeats_extend_the_held_deliveries_past_the_topics_ack_timeout(
    lease_member: bool,
) -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.4)
        topic.create_group("spark")
        reports = [topic.publish(n) for n in range(6)]
        log = _log(topic, lease_seconds=5.0, lease_member=lease_member)
        end = log.latest(0, 6)

        for _ in range(6):  # 1.2 s in all: three ack timeouts, a heartbeat every 0.2 s
            time.sleep(0.2)  # sleep-ok: the passage of time is what is tested
            log.heartbeat()
        log.ack(end)
        outcomes = [r.outcome.result(timeout=5) for r in reports]
        stats = topic.stats()

    assert end == 6
    assert [o.acked for o in outcomes] == [True] * 6
    assert (stats.timed_out, stats.dead_lettered, stats.pending) == (0, 0, 0)


def test_without_heartbeats_the_topics_ack_timeout_still_applies() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=0.3)
        topic.create_group("spark")
        reports = [topic.publish(n) for n in range(3)]
        log = _log(topic, lease_seconds=5.0)
        log.latest(0, 3)

        outcomes = [r.outcome.result(timeout=5) for r in reports]

    assert [n.reason for o in outcomes for n in o.nacks] == ["timeout"] * 3
