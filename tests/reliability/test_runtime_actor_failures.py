"""A runtime actor that fails loses nothing and fails loudly (issue 17, item 1).

A balanced group ends (it dead-letters what waits and what comes); a topic whose actor the
root supervisor gives up closes alone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import pytest

from runtime import Bus, Delivery
from runtime.core.settlement._tracker import TrackerActor
from runtime.core.subscribers._group import Fifo
from runtime.errors import TopicClosedError

pytestmark = pytest.mark.reliability


def test_a_failing_group_dead_letters_what_waits_and_later_messages(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # A defect inside the group actor (not a handler): queuing its third chunk raises.
    extend = Fifo.extend
    calls = []

    def extend_then_fail(self: Fifo, envelopes: list[Any]) -> None:
        if envelopes:
            calls.append(len(envelopes))
        if len(calls) == 3:
            raise RuntimeError("books out of order")
        extend(self, envelopes)

    monkeypatch.setattr(Fifo, "extend", extend_then_fail)
    restarted = threading.Event()
    seen: list[int] = []
    with Bus() as bus:
        bus.system.events.subscribe(
            lambda event: restarted.set() if event.kind == "restarted" else None)
        topic = bus.create_topic("t", ack_timeout=5.0)
        topic.subscribe(lambda d: (seen.append(d.message), d.ack()), group="g")
        with caplog.at_level(logging.ERROR, logger="runtime"):
            outcomes = [topic.publish(n).outcome.result(timeout=10) for n in (1, 2)]
            reports = [topic.publish(n) for n in range(3, 7)]
            outcomes += [r.outcome.result(timeout=10) for r in reports]
        assert topic.join(timeout=10)
        stats = topic.stats()
        letters = list(topic.dead_letters)

    assert [o.acked for o in outcomes] == [True, True, False, False, False, False]
    assert seen == [1, 2]
    assert [letter.message for letter in letters] == [3, 4, 5, 6]
    assert {letter.reason for letter in letters} == {"dropped"}
    assert all("group 'g' failed: RuntimeError: books out of order" in (letter.error or "")
               for letter in letters)
    assert (stats.published, stats.pending) == (6, 0)
    assert not restarted.is_set()
    assert any("balanced group 'g' of topic 't' failed" in r.getMessage() for r in caplog.records)


def test_a_group_that_failed_still_settles_what_its_members_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The failure comes while a member holds a delivery: that one still settles by its ack.
    release = threading.Event()
    holding = threading.Event()

    def handler(delivery: Delivery[Any]) -> None:
        if delivery.message == 1:
            holding.set()
            release.wait(timeout=10)
        delivery.ack()

    extend = Fifo.extend

    def extend_then_fail(self: Fifo, envelopes: list[Any]) -> None:
        if holding.is_set() and envelopes:
            raise RuntimeError("boom")
        extend(self, envelopes)

    monkeypatch.setattr(Fifo, "extend", extend_then_fail)
    with Bus() as bus:
        topic = bus.create_topic("t", ack_timeout=None)
        topic.subscribe(handler, group="g")
        first = topic.publish(1)
        assert holding.wait(timeout=10)
        second = topic.publish(2)
        refused = second.outcome.result(timeout=10)
        release.set()
        held = first.outcome.result(timeout=10)
        assert topic.join(timeout=10)

    assert held.acked
    assert not refused.acked and [n.reason for n in refused.nacks] == ["dropped"]


def test_a_topic_whose_actor_is_given_up_closes_and_the_others_keep_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The tracker of topic "broken" fails on every settlement: past its restart budget the
    # root stops it, and the bus closes that topic (not the bus, not the other topic).
    def always_fail(self: TrackerActor, message: Any) -> Any:
        if self._ledger._topic == "broken" and isinstance(message, list):
            raise RuntimeError("tracker defect")
        return tracker_receive(self, message)

    tracker_receive = TrackerActor.on_receive
    monkeypatch.setattr(TrackerActor, "on_receive", always_fail)
    escalated = threading.Event()
    with Bus() as bus:
        bus.system.events.subscribe(
            lambda event: escalated.set() if event.kind == "escalated" else None)
        broken = bus.create_topic("broken", ack_timeout=None)
        healthy = bus.create_topic("healthy", ack_timeout=5.0)
        broken.subscribe(lambda d: d.ack(), group="g")
        healthy.subscribe(lambda d: d.ack(), group="g")
        for n in range(20):
            if escalated.is_set():
                break
            with contextlib.suppress(TopicClosedError):
                broken.publish(n)
                broken.join(timeout=0.5)
        assert escalated.wait(timeout=10)
        for closer in list(bus._closers):  # the bus closes the topic on a thread of its own
            closer.join(timeout=10)
        assert broken.closed
        report = healthy.publish("still here")

        assert report.outcome.result(timeout=10).acked
        with pytest.raises(TopicClosedError):
            broken.publish("after")
        assert not healthy.closed

