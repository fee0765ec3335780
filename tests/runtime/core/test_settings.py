"""TopicSettings: cascade from bus defaults and validation order (issue 3 item 10)."""

from __future__ import annotations

import pytest

from runtime import Bus, TopicSettings
from runtime.errors import (
    InvalidSettingsError,
    TopicExistsError,
    TopicNotFoundError,
    UnsupportedPolicyError,
)


def test_defaults_match_the_contract() -> None:
    settings = TopicSettings()

    assert (settings.message_type, settings.ack_timeout, settings.max_pending) == (None, 30.0, None)
    assert (settings.throttle, settings.balanced_capacity, settings.broadcast_capacity) == (
        0.0, 128, 128,
    )
    assert (settings.balanced_on_full, settings.broadcast_on_lag) == ("block", "block")
    assert (settings.max_delivery_attempts, settings.dead_letter_limit) == (1, 10_000)
    assert settings.backend == "in_memory"


def test_settings_are_frozen() -> None:
    settings = TopicSettings()

    with pytest.raises(AttributeError):
        settings.throttle = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"backend": "kafka", "balanced_capacity": 0}, "backend"),
        ({"balanced_capacity": 0, "throttle": 2.0}, "balanced_capacity"),
        ({"broadcast_capacity": -1, "throttle": 2.0}, "broadcast_capacity"),
        ({"broadcast_capacity": 10**10}, "broadcast_capacity"),  # slots allocated up front
        ({"throttle": 0.5}, "throttle"),
        ({"max_pending": 10, "throttle": 1.0}, "throttle"),
        ({"max_pending": 10, "throttle": -0.1}, "throttle"),
        ({"max_pending": 0}, "max_pending"),
        ({"ack_timeout": 0}, "ack_timeout"),
        ({"max_delivery_attempts": 0}, "max_delivery_attempts"),
        ({"dead_letter_limit": 0}, "dead_letter_limit"),
        ({"balanced_on_full": "spill"}, "balanced_on_full"),
        ({"broadcast_on_lag": "wait"}, "broadcast_on_lag"),
        ({"balanced_capacity": True}, "balanced_capacity"),
        ({"ack_timeout": float("inf")}, "ack_timeout"),
        ({"ack_timeout": float("nan")}, "ack_timeout"),
        ({"max_pending": 10, "throttle": float("nan")}, "throttle"),
        ({"throttle": float("inf")}, "throttle"),
    ],
)
def test_invalid_settings_name_the_first_failing_setting(
    overrides: dict[str, object], setting: str,
) -> None:
    with pytest.raises(InvalidSettingsError) as info:
        TopicSettings().merged(**overrides).validate()

    assert info.value.setting == setting
    assert setting in str(info.value)


def test_validation_order_checks_backend_before_capacities_before_throttle() -> None:
    bad = TopicSettings(backend="kafka", balanced_capacity=0, throttle=5.0,
                        broadcast_on_lag="disconnect")

    with pytest.raises(InvalidSettingsError) as first:
        bad.validate()
    with pytest.raises(InvalidSettingsError) as second:
        TopicSettings(balanced_capacity=0, throttle=5.0).validate()
    with pytest.raises(InvalidSettingsError) as third:
        TopicSettings(throttle=5.0, broadcast_on_lag="disconnect").validate()

    assert [first.value.setting, second.value.setting, third.value.setting] == [
        "backend", "balanced_capacity", "throttle",
    ]


def test_redis_is_a_backend_and_refuses_the_policies_it_cannot_honour() -> None:
    TopicSettings(backend="redis").validate()

    with pytest.raises(UnsupportedPolicyError) as info:
        TopicSettings(backend="redis", balanced_on_full="drop_newest").validate()

    assert info.value.setting == "balanced_on_full"


def test_in_memory_backend_takes_one_partition_only() -> None:
    TopicSettings(partitions=1).validate()

    with pytest.raises(InvalidSettingsError) as info:
        TopicSettings(partitions=2).validate()

    assert info.value.setting == "partitions"
    assert "partitions" in str(info.value)


def test_disconnect_is_unsupported_by_the_in_memory_backend() -> None:
    with pytest.raises(UnsupportedPolicyError) as info:
        TopicSettings(broadcast_on_lag="disconnect").validate()

    assert isinstance(info.value, InvalidSettingsError)
    assert "broadcast_on_lag" in str(info.value)
    assert "disconnect" in str(info.value)


def test_valid_throttle_settings_pass() -> None:
    TopicSettings(max_pending=10, throttle=0.5).validate()
    TopicSettings(max_pending=1, throttle=0.999).validate()


def test_unknown_override_is_rejected_by_name() -> None:
    with pytest.raises(InvalidSettingsError) as info:
        TopicSettings().merged(capacity=3)

    assert info.value.setting == "capacity"


def test_bus_defaults_cascade_and_explicit_arguments_win() -> None:
    defaults = TopicSettings(max_pending=50, ack_timeout=5.0, balanced_capacity=16)

    with Bus(defaults=defaults) as bus:
        inherited = bus.create_topic("a")
        overridden = bus.create_topic("b", balanced_capacity=4, max_pending=None)

        assert (inherited.settings.max_pending, inherited.settings.ack_timeout) == (50, 5.0)
        assert inherited.settings.balanced_capacity == 16
        assert overridden.settings.balanced_capacity == 4
        assert overridden.settings.max_pending is None
        assert overridden.settings.ack_timeout == 5.0


def test_create_topic_checks_the_name_before_the_settings() -> None:
    with Bus() as bus:
        bus.create_topic("taken")

        with pytest.raises(InvalidSettingsError) as empty:
            bus.create_topic("", backend="nope")
        with pytest.raises(TopicExistsError):
            bus.create_topic("taken", backend="nope")
        with pytest.raises(InvalidSettingsError) as bad:
            bus.create_topic("fresh", backend="nope")

        assert empty.value.setting == "name"
        assert bad.value.setting == "backend"
        assert bus.topics() == ["taken"]


def test_invalid_topic_is_not_created() -> None:
    with Bus() as bus:
        with pytest.raises(UnsupportedPolicyError):
            bus.create_topic("t", broadcast_on_lag="disconnect")

        with pytest.raises(TopicNotFoundError):
            bus.topic("t")
