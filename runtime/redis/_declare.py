"""Declare semantics: the first process to create a topic records its settings in Redis;
every later one attaches when its settings match. The records also tell an inspector (the
command line's ``--redis``) which topics a Redis holds."""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from runtime.core._settings import TopicSettings
from runtime.errors import InvalidSettingsError, TopicNotFoundError
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys

__all__ = ["declare", "recorded_settings", "topic_names"]

_SETTINGS_PATTERN = "{actorbus:*:0}:settings"


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


def topic_names(connection: Connection) -> list[str]:
    """The names of every topic declared on this Redis, sorted (SCAN, never KEYS).

    Raises:
        BackendUnavailableError: Redis did not answer.
    """
    names = []
    with connection.guard():
        for key in connection.client.scan_iter(match=_SETTINGS_PATTERN, count=1000):
            text = key.decode()
            names.append(text[len("{actorbus:"):-len(":0}:settings")])
    return sorted(names)


def recorded_settings(connection: Connection, name: str) -> TopicSettings:
    """The settings topic ``name`` was declared with (its ``message_type`` left out: a
    type is recorded by name only).

    Raises:
        TopicNotFoundError: no such topic on this Redis.
        BackendUnavailableError: Redis did not answer.
    """
    with connection.guard():
        raw = connection.client.hgetall(TopicKeys.of(name).settings)
    if not raw:
        raise TopicNotFoundError(name)
    held = {key.decode(): value.decode() for key, value in raw.items()}
    values: dict[str, Any] = {}
    for field in dataclasses.fields(TopicSettings):
        text = held.get(field.name)
        if field.name == "message_type" or text is None:
            continue
        values[field.name] = None if text == "" else ast.literal_eval(text)
    return TopicSettings(**values)
