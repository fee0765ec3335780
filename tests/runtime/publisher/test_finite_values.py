"""Non-finite timeouts and float settings are refused before anything is sent."""

from __future__ import annotations

import math

import pytest
from support.publisher import FakeTopic

from actors import ActorSystem
from runtime.errors import PublishError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher

NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE)
def test_batch_settings_refuse_a_non_finite_max_latency_with_code_3(value: float) -> None:
    with pytest.raises(PublishError) as caught:
        BatchSettings(max_latency=value)

    assert caught.value.code == 3 and "max_latency" in str(caught.value)


@pytest.mark.parametrize("value", NON_FINITE)
def test_flow_control_refuses_a_non_finite_block_timeout_with_code_3(value: float) -> None:
    with pytest.raises(PublishError) as caught:
        FlowControl(max_outstanding_messages=1, block_timeout=value)

    assert caught.value.code == 3 and "block_timeout" in str(caught.value)


@pytest.mark.parametrize("value", NON_FINITE)
def test_set_options_refuses_a_non_finite_latency_and_changes_nothing(
    system: ActorSystem, value: float,
) -> None:
    with Publisher(FakeTopic(), system=system) as pub:
        with pytest.raises(PublishError) as caught:
            pub.set_options(batching={"max_latency": value})

        assert caught.value.code == 3 and pub.batching == BatchSettings()


@pytest.mark.parametrize("value", [*NON_FINITE, -1.0])
def test_flush_refuses_a_non_finite_timeout_before_sending(system: ActorSystem, value: float) -> None:
    topic = FakeTopic()
    with Publisher(topic, system=system, batching=BatchSettings(max_latency=60.0)) as pub:
        future = pub.publish(b"waiting")

        with pytest.raises(ValueError, match="timeout"):
            pub.flush(timeout=value)

        assert not future.done() and topic.batches == []  # nothing was sent
        pub.flush(timeout=10.0)
        assert future.result(timeout=0) == "fake-1"


@pytest.mark.parametrize("value", [*NON_FINITE, -1.0])
def test_close_refuses_a_non_finite_timeout_and_stays_open(system: ActorSystem, value: float) -> None:
    topic = FakeTopic()
    pub = Publisher(topic, system=system, batching=BatchSettings(max_latency=60.0))
    first = pub.publish(b"first")

    with pytest.raises(ValueError, match="timeout"):
        pub.close(timeout=value)

    assert not pub.closed and topic.batches == []
    second = pub.publish(b"second")
    pub.close(timeout=10.0)
    assert [first.result(timeout=0), second.result(timeout=0)] == ["fake-1", "fake-2"]
