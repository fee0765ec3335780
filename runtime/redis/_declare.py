"""Declare semantics: the first process to create a topic records its settings in Redis;
every later one attaches when its settings match."""

from __future__ import annotations

import dataclasses

from runtime.core._settings import TopicSettings
from runtime.errors import InvalidSettingsError
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys

__all__ = ["declare"]


def _recorded(settings: TopicSettings) -> dict[str, str]:
    """The settings as Redis keeps them, in declaration order (a type by its name)."""
    record = {}
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if isinstance(value, type):
            value = f"{value.__module__}.{value.__qualname__}"
        record[field.name] = "" if value is None else repr(value)
    return record


def declare(connection: Connection, keys: TopicKeys, settings: TopicSettings) -> bool:
    """Record ``settings`` for the topic, or check them against those Redis holds.

    Returns True when this created the topic, False when it attached to one.

    Raises:
        InvalidSettingsError: Redis holds the topic with other settings; names the first
            that differs.
        BackendUnavailableError: Redis did not answer.
    """
    mine = _recorded(settings)
    flat = [part for pair in mine.items() for part in pair]
    held = connection.run("DECLARE", [keys.settings], flat)
    if not held:
        return True
    theirs = {name.decode(): value.decode() for name, value in zip(held[::2], held[1::2],
                                                                    strict=True)}
    for name, value in mine.items():
        if theirs.get(name) != value:
            raise InvalidSettingsError(
                name, f"the topic exists in Redis with {name}={theirs.get(name) or None}, "
                f"not {value or None}")
    return False
