"""The topics file of ``actorbus serve``: which topics and groups a standalone broker holds.

A TOML file (read with the standard library's ``tomllib``)::

    [defaults]                 # optional: settings every topic starts from
    ack_timeout = 30.0

    [topics.orders]            # one table per topic: TopicSettings fields ...
    max_pending = 10000
    groups = ["billing", "analytics"]   # ... plus the groups to create up front

    [topics.revenue]

``message_type`` cannot be set from a file (remote peers publish builtins and
`Message` objects). Values are validated by ``Bus.create_topic``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.core._bus import Bus
from runtime.core._settings import TopicSettings
from runtime.errors import InvalidSettingsError

__all__ = ["TopicSpec", "TopicsFile", "TopicsFileError", "load_topics"]

_SETTINGS = frozenset(f.name for f in dataclasses.fields(TopicSettings)) - {"message_type"}


class TopicsFileError(ValueError):
    """The topics file is missing, not TOML, or names something unknown."""

    def __init__(self, path: str = "", detail: str = "") -> None:
        super().__init__(path, detail)

    def __str__(self) -> str:
        return f"topics file {self.args[0]}: {self.args[1]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """One topic of the file: its settings and the groups to create."""

    name: str
    settings: dict[str, Any]
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicsFile:
    """A parsed topics file."""

    defaults: dict[str, Any]
    topics: tuple[TopicSpec, ...]

    def build(self) -> Bus:
        """A new `Bus` holding these topics and groups (the caller closes it).

        Raises:
            InvalidSettingsError: a value is out of range (the bus is closed first).
        """
        bus = Bus(defaults=TopicSettings().merged(**self.defaults))
        try:
            for spec in self.topics:
                topic = bus.create_topic(spec.name, **spec.settings)
                for group in spec.groups:
                    topic.create_group(group)
        except BaseException:
            bus.close()
            raise
        return bus


def load_topics(path: str | Path) -> TopicsFile:
    """Read and check the topics file at ``path``.

    Raises:
        TopicsFileError: unreadable, not TOML, no topics, an unknown key, or a value out
            of range (naming the file and the topic).
    """
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TopicsFileError(str(path), exc.strerror or str(exc)) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TopicsFileError(str(path), f"not valid TOML: {exc}") from exc
    unknown = set(document) - {"defaults", "topics"}
    if unknown:
        raise TopicsFileError(
            str(path), f"unknown table(s) {sorted(unknown)}; use [defaults] and [topics.NAME]")
    defaults = _table(path, document.get("defaults", {}), "[defaults]")
    _check_settings(path, defaults, "[defaults]")
    topics = _table(path, document.get("topics", {}), "[topics]")
    if not topics:
        raise TopicsFileError(str(path), "no topics: add a [topics.NAME] table")
    specs = tuple(_spec(path, n, t) for n, t in topics.items())
    for spec in specs:
        _check_values(path, defaults, spec)
    return TopicsFile(defaults=defaults, topics=specs)


def _check_values(path: str | Path, defaults: dict[str, Any], spec: TopicSpec) -> None:
    """Validate what ``spec`` will be created with, naming the file and the topic."""
    try:
        TopicSettings().merged(**defaults).merged(**spec.settings).validate()
    except InvalidSettingsError as exc:
        raise TopicsFileError(str(path), f"[topics.{spec.name}] {exc}") from exc


def _spec(path: str | Path, name: str, table: Any) -> TopicSpec:
    where = f"[topics.{name}]"
    settings = dict(_table(path, table, where))
    groups = settings.pop("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise TopicsFileError(str(path), f"{where} groups must be a list of names")
    _check_settings(path, settings, where)
    return TopicSpec(name=name, settings=settings, groups=tuple(groups))


def _table(path: str | Path, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TopicsFileError(str(path), f"{where} must be a table")
    return value


def _check_settings(path: str | Path, settings: dict[str, Any], where: str) -> None:
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise TopicsFileError(
            str(path), f"{where} unknown setting(s) {unknown}; known: {', '.join(sorted(_SETTINGS))}")
