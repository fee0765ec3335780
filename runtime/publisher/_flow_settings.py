"""Publisher flow-control settings: `FlowControl`, checked when built."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from runtime.errors import PublishError

__all__ = ["FlowControl", "LimitExceeded"]

LimitExceeded = Literal["block", "error", "ignore"]

_LIMIT_BEHAVIOURS = ("block", "error", "ignore")


def _invalid(setting: str, detail: str, value: object) -> PublishError:
    return PublishError(f"Invalid flow control setting {setting}: {detail}, got {value!r}", 3)


def _check_limit(setting: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(setting, "must be None or an int >= 1", value)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowControl:
    """How many messages and bytes a Publisher may hold unconfirmed.

    Attributes:
        max_outstanding_messages: None (unlimited) or the most messages accepted but
            not yet confirmed.
        max_outstanding_bytes: None (unlimited) or the most bytes (``Message.size``)
            accepted but not yet confirmed.
        limit_exceeded: ``"block"`` waits first-come first-served, ``"error"`` raises
            `FlowControlError` at once, ``"ignore"`` never limits.
        block_timeout: None (wait as long as it takes) or the seconds (finite, >= 0)
            a blocked publish waits before it raises `FlowControlError`.

    Raises:
        PublishError: code 3 when a value is out of range.
    """

    max_outstanding_messages: int | None = None
    max_outstanding_bytes: int | None = None
    limit_exceeded: LimitExceeded = "block"
    block_timeout: float | None = None

    def __post_init__(self) -> None:
        _check_limit("max_outstanding_messages", self.max_outstanding_messages)
        _check_limit("max_outstanding_bytes", self.max_outstanding_bytes)
        if self.limit_exceeded not in _LIMIT_BEHAVIOURS:
            raise _invalid("limit_exceeded", "must be 'block', 'error' or 'ignore'",
                           self.limit_exceeded)
        timeout = self.block_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not math.isfinite(timeout) or timeout < 0
        ):
            raise _invalid("block_timeout", "must be None or a finite number >= 0", timeout)

    @property
    def limited(self) -> bool:
        """True when some limit applies (a limit is set and the behaviour is not ignore)."""
        return self.limit_exceeded != "ignore" and (
            self.max_outstanding_messages is not None or self.max_outstanding_bytes is not None
        )
