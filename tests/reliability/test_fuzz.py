"""Fuzzing the public API with hypothesis: only documented, typed errors come out.

Settings, publish arguments, publisher options and delivery misuse are driven with
arbitrary values; every call must either work or raise one of the documented errors,
never hang (each test is bounded) and never leak an internal error.
"""
# ruff: noqa: PT017 - "works, or raises a documented error": the except blocks check which one

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import BatchSettings, Bus, FlowControl, TopicSettings
from runtime.errors import (
    BusError,
    InvalidSettingsError,
    PublishError,
    SettlementError,
    TopicExistsError,
)

pytestmark = pytest.mark.reliability

anything = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
    st.text(max_size=8), st.binary(max_size=8), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3),
)
FIELDS = ("ack_timeout", "max_pending", "throttle", "balanced_capacity", "balanced_on_full",
          "broadcast_capacity", "broadcast_on_lag", "max_delivery_attempts",
          "dead_letter_limit", "backend", "message_type")
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def bus() -> Any:
    with Bus() as bus:  # topics made here, so no test starts threads that outlive it
        bus.create_topic("fuzz-publish", message_type=int, ack_timeout=None)
        bus.create_topic("fuzz-pub", ack_timeout=None)
        bus.create_topic("fuzz-settle", ack_timeout=None).create_group("g")
        yield bus


@FUZZ
@given(name=st.text(max_size=6), overrides=st.dictionaries(st.sampled_from(FIELDS), anything, max_size=4))
def test_create_topic_either_works_or_names_the_bad_setting(bus: Bus, name: str,
                                                            overrides: dict[str, Any]) -> None:
    try:
        topic = bus.create_topic(name, **overrides)
    except (InvalidSettingsError, TopicExistsError) as exc:
        assert str(exc)
        if isinstance(exc, InvalidSettingsError) and name:
            assert exc.args[0] in (*FIELDS, "name")
        return
    assert isinstance(topic.settings, TopicSettings)
    bus.remove_topic(name)


@FUZZ
@given(message=anything, key=st.one_of(st.none(), st.text(max_size=4), st.integers()),
       attributes=st.one_of(st.none(), anything))
def test_publish_either_works_or_raises_a_typed_error(bus: Bus, message: Any, key: Any,
                                                      attributes: Any) -> None:
    topic = bus.topic("fuzz-publish")
    try:
        report = topic.publish(message, key=key, attributes=attributes, timeout=1.0)
    except (BusError, TypeError, ValueError) as exc:  # MessageTypeError is both
        assert str(exc)
        return
    assert report.outcome.result(timeout=5).nacks[0].reason == "no_subscribers"


@FUZZ
@given(batching=st.dictionaries(st.sampled_from(["max_messages", "max_bytes", "max_latency"]),
                                anything, max_size=3),
       flow=st.dictionaries(st.sampled_from(["max_outstanding_messages", "max_outstanding_bytes",
                                             "limit_exceeded", "block_timeout"]), anything, max_size=4))
def test_publisher_options_are_valid_or_refused_with_code_3(batching: dict[str, Any],
                                                            flow: dict[str, Any]) -> None:
    try:
        BatchSettings(**batching)
        FlowControl(**flow)
    except PublishError as exc:
        assert exc.code == 3 and str(exc)


@FUZZ
@given(data=anything, attributes=anything, ordering_key=anything)
def test_publisher_publish_validates_at_the_boundary(bus: Bus, data: Any, attributes: Any,
                                                     ordering_key: Any) -> None:
    topic = bus.topic("fuzz-pub")
    with topic.publisher(message_ordering=True) as publisher:
        try:
            future = publisher.publish(data, attributes=attributes, ordering_key=ordering_key)
        except PublishError as exc:
            assert exc.code == 3 and str(exc)
            return
        assert isinstance(future.result(timeout=5), str)


@FUZZ
@given(actions=st.lists(st.sampled_from(["ack", "nack", "nack-text"]), min_size=2, max_size=5))
def test_settling_twice_always_raises_settlement_error(bus: Bus, actions: list[str]) -> None:
    topic = bus.topic("fuzz-settle")
    pull = topic.subscription(group="g")
    try:
        topic.publish("m")
        delivery = pull.receive(timeout=5)
        for index, action in enumerate(actions):
            call = {"ack": delivery.ack, "nack": delivery.nack,
                    "nack-text": lambda: delivery.nack("why")}[action]
            if index == 0:
                call()
                assert not delivery.pending
            else:
                with pytest.raises(SettlementError):
                    call()
    finally:
        pull.unsubscribe()
