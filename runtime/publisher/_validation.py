"""Validation of what a Publisher is given: message fields and settings (code 3 errors).

Every check raises `PublishError` code 3 synchronously, in the caller's thread, before
anything is admitted or enqueued.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from runtime.core._message import Message
from runtime.errors import InvalidSettingsError, PublishError
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl

__all__ = [
    "MAX_MESSAGE_SIZE",
    "MAX_ORDERING_KEY_BYTES",
    "as_bytes",
    "check_ordering",
    "checked_attributes",
    "checked_key",
    "checked_timeout",
    "checked_topic",
    "closed_error",
    "merge",
]

MAX_MESSAGE_SIZE = 10 * 1024 * 1024
MAX_ORDERING_KEY_BYTES = 1024

_Settings = TypeVar("_Settings", BatchSettings, FlowControl)


def closed_error() -> PublishError:
    """The error of a publish on a closed Publisher (code 9)."""
    return PublishError("Publisher is closed", 9)


def checked_timeout(timeout: float | None) -> float | None:
    """``timeout`` of a blocking call: None (no bound) or a finite number of seconds.

    Raises:
        ValueError: ``nan``, an infinity or a negative number (a call argument, not a
            setting: not a `PublishError`).
        TypeError: not a number.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be None or a number, got {type(timeout).__qualname__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be None or a finite number >= 0, got {timeout!r}")
    return timeout


def checked_topic(topic: Any) -> None:
    """Refuse a topic whose ``message_type`` accepts neither a `Message` nor its bytes.

    A Publisher sends `Message` objects (a typed topic also takes one whose ``data`` is
    of its type): on any other typed topic every future would fail later.

    Raises:
        InvalidSettingsError: naming ``message_type``.
    """
    settings = getattr(topic, "settings", None)
    expected = getattr(settings, "message_type", None)
    if expected is None or issubclass(Message, expected) or issubclass(bytes, expected):
        return
    raise InvalidSettingsError(
        "message_type",
        f"topic {topic.name!r} takes {expected.__qualname__} messages; a Publisher sends "
        "Message objects with bytes data (publish with topic.publish instead)",
    )


def as_bytes(data: object) -> bytes:
    """``data`` as bytes (bytes-like objects are copied); code 3 for anything else."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise PublishError("Message data must be bytes", 3)


def checked_attributes(attributes: Mapping[str, str], size: int) -> tuple[dict[str, str], int]:
    """A private copy of ``attributes`` and ``size`` plus their UTF-8 length."""
    if not isinstance(attributes, Mapping):
        raise PublishError("Message attributes must be a mapping of str to str", 3)
    copy = dict(attributes)
    for name, value in copy.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise PublishError("Message attribute keys and values must be str", 3)
        size += len(name.encode()) + len(value.encode())
    return copy, size


class OrderingKeyTypeError(PublishError, TypeError):
    """An ordering key that is not a str: code 3, and a `TypeError` like every key
    refused at a topic's boundary."""


def checked_key(key: str) -> str | None:
    """The ordering key, None for ``""``; code 3 when not a str or over 1024 bytes."""
    if not isinstance(key, str):
        raise OrderingKeyTypeError(
            f"Ordering key must be a str or None, got {type(key).__qualname__}", 3,
        )
    if not key:
        return None
    if len(key) * 4 > MAX_ORDERING_KEY_BYTES and len(key.encode()) > MAX_ORDERING_KEY_BYTES:
        raise PublishError(f"Ordering key exceeds maximum of {MAX_ORDERING_KEY_BYTES} bytes", 3)
    return key


def check_ordering(value: object) -> bool:
    """``value`` if it is a bool; code 3 otherwise."""
    if not isinstance(value, bool):
        raise PublishError(f"message_ordering must be a bool, got {value!r}", 3)
    return value


def merge(kind: type[_Settings], current: _Settings, update: object, part: str) -> _Settings:
    """``update`` (None, a settings object or a mapping of fields) applied to ``current``."""
    if update is None:
        return current
    if isinstance(update, kind):
        return update
    if isinstance(update, Mapping):
        try:
            return replace(current, **update)
        except TypeError as exc:  # an unknown field name
            raise PublishError(f"Invalid {part} option: {exc}", 3) from exc
    raise PublishError(f"{part} must be a {kind.__name__}, got {update!r}", 3)
