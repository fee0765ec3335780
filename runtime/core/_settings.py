"""Per-topic settings, their cascade from bus defaults, and their validation; and the one
check of a blocking call's ``timeout=`` argument (`check_timeout`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from runtime.errors import InvalidSettingsError, UnsupportedPolicyError

__all__ = ["TopicSettings", "check_timeout"]

_BACKENDS = ("in_memory", "redis")
_ON_FULL = ("block", "drop_newest")
_ON_LAG = ("block", "drop_oldest", "disconnect")
# What each backend can honour; anything else is an UnsupportedPolicyError.
_CAPABILITIES: dict[str, dict[str, tuple[str, ...]]] = {
    "in_memory": {"balanced_on_full": _ON_FULL, "broadcast_on_lag": ("block", "drop_oldest")},
    # Redis Streams: a group never fills (the stream holds what waits) and each broadcast
    # reader keeps its own cursor, so neither policy has anything to drop.
    "redis": {"balanced_on_full": ("block",), "broadcast_on_lag": ("block",)},
}
# Partitions per backend: the in-memory topic is one queue per group.
_MAX_PARTITIONS = {"in_memory": 1, "redis": 1024}


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSettings:
    """How a topic buffers, paces, tracks and gives up on its messages.

    Attributes:
        message_type: published messages must be instances of it (None: anything).
        ack_timeout: seconds a subscriber has to settle a delivery (None: no deadline).
        max_pending: unsettled messages at which publishers wait (None: unbounded).
        throttle: free-slot ratio under which publishers slow down (needs ``max_pending``).
        balanced_capacity: queued messages per balanced group (a Publisher batch that
            finds the queue not full goes in whole: it may pass this by less than one
            batch).
        balanced_on_full: ``"block"`` the publisher or ``"drop_newest"`` for that group.
        broadcast_capacity: entries of the topic's broadcast ring.
        broadcast_on_lag: what happens when a subscriber is a whole ring behind:
            ``"block"`` holds publishers until it reads (bounded by ``publish(timeout=)``),
            ``"drop_oldest"`` skips the overwritten entries (each settles as ``lagged``).
        max_delivery_attempts: attempts per balanced delivery before dead-lettering.
        dead_letter_limit: dead letters kept (newest win, evictions counted); None keeps
            every one, without bound.
        backend: where messages live: ``"in_memory"`` (this process) or ``"redis"``
            (Redis Streams, through the bus's ``redis`` connection).
        partitions: streams the topic is split over (the in-memory backend takes 1).
    """

    message_type: type | None = None
    ack_timeout: float | None = 30.0
    max_pending: int | None = None
    throttle: float = 0.0
    balanced_capacity: int = 128
    balanced_on_full: Literal["block", "drop_newest"] = "block"
    broadcast_capacity: int = 128
    broadcast_on_lag: Literal["block", "drop_oldest", "disconnect"] = "block"
    max_delivery_attempts: int = 1
    dead_letter_limit: int | None = 10_000
    backend: str = "in_memory"
    partitions: int = 1

    def merged(self, **overrides: Any) -> TopicSettings:
        """Return a copy with ``overrides`` applied; an explicit None wins too.

        Raises:
            InvalidSettingsError: an override names no setting.
        """
        known = {f.name for f in dataclasses.fields(self)}
        for name in overrides:
            if name not in known:
                raise InvalidSettingsError(name, "unknown setting")
        return dataclasses.replace(self, **overrides)

    def validate(self) -> None:
        """Check every setting, in the documented order.

        Order: backend, capacities, throttle rules, the other ranges, policy values,
        then what the backend can honour.

        Raises:
            InvalidSettingsError: a setting is out of range (the error names it).
            UnsupportedPolicyError: the backend cannot honour a policy value.
        """
        if self.backend not in _BACKENDS:
            raise InvalidSettingsError("backend", f"unknown backend {self.backend!r}")
        _positive_int("partitions", self.partitions)
        if self.partitions > _MAX_PARTITIONS[self.backend]:
            raise InvalidSettingsError(
                "partitions", f"backend {self.backend!r} takes at most "
                f"{_MAX_PARTITIONS[self.backend]}, got {self.partitions!r}")
        _positive_int("balanced_capacity", self.balanced_capacity)
        _positive_int("broadcast_capacity", self.broadcast_capacity)
        if self.broadcast_capacity > MAX_BROADCAST_CAPACITY:
            # The ring's slots are allocated up front: a typo of a few digits must be a
            # typed error, not a process that allocates until the OOM killer ends it.
            raise InvalidSettingsError(
                "broadcast_capacity",
                f"must be at most {MAX_BROADCAST_CAPACITY:,}, got {self.broadcast_capacity!r}")
        if self.max_pending is not None:
            _positive_int("max_pending", self.max_pending)
        self._validate_throttle()
        self._validate_ranges()
        self._validate_policies()

    def _validate_throttle(self) -> None:
        throttle = self.throttle
        if isinstance(throttle, bool) or not isinstance(throttle, int | float):
            raise InvalidSettingsError("throttle", f"must be a number, got {throttle!r}")
        if not math.isfinite(throttle):
            raise InvalidSettingsError("throttle", f"must be finite, got {throttle!r}")
        if throttle == 0:
            return
        if self.max_pending is None:
            raise InvalidSettingsError("throttle", "needs max_pending")
        if not 0 < throttle < 1:
            raise InvalidSettingsError("throttle", f"must be in (0, 1), got {throttle!r}")

    def _validate_ranges(self) -> None:
        timeout = self.ack_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not math.isfinite(timeout) or timeout <= 0
        ):
            raise InvalidSettingsError(
                "ack_timeout", f"must be a finite number > 0 or None, got {timeout!r}")
        _positive_int("max_delivery_attempts", self.max_delivery_attempts)
        if self.dead_letter_limit is not None:
            _positive_int("dead_letter_limit", self.dead_letter_limit)
        if self.message_type is not None and not isinstance(self.message_type, type):
            raise InvalidSettingsError(
                "message_type", f"must be a type or None, got {self.message_type!r}"
            )

    def _validate_policies(self) -> None:
        policies = {"balanced_on_full": _ON_FULL, "broadcast_on_lag": _ON_LAG}
        for setting, allowed in policies.items():
            value = getattr(self, setting)
            if value not in allowed:
                raise InvalidSettingsError(setting, f"must be one of {allowed}, got {value!r}")
        for setting, supported in _CAPABILITIES[self.backend].items():
            value = getattr(self, setting)
            if value not in supported:
                raise UnsupportedPolicyError(setting, value, self.backend)


MAX_BROADCAST_CAPACITY = 1 << 24
"""The most broadcast ring entries (16,777,216 slots: 128 MiB allocated with the topic)."""


def _positive_int(setting: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidSettingsError(setting, f"must be an int > 0, got {value!r}")


def check_timeout(name: str, value: float | None) -> None:
    """Refuse a timeout that no wait could honour: not a number, NaN or infinite.

    None (wait without bound) and any finite number pass; a number <= 0 is a wait that
    has already run out. Called before anything is sent, so a refused call changes
    nothing.

    Raises:
        ValueError: ``value`` is NaN or infinite (the message names ``name``).
        TypeError: ``value`` is neither None nor a real number.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds or None, got {value!r}")
