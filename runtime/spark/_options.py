"""The options of the ``actorbus`` format, read once and carried as a frozen value.

Spark hands a data source its options as strings in a case-insensitive mapping. The
authkey never appears there: ``authkey_env`` names the environment variable holding
it, read in each process that connects (driver runner, executor task, commit worker),
so keys never sit in query plans or logs.

A query reads and writes either through a broker endpoint (``address``, ``authkey_env``:
an in-memory bus served by ``bus.serve``) or straight from a Redis (``redis``: a URL),
never both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.broker._client import Address, Channel, parse_address
from runtime.core._settings import TopicSettings
from runtime.errors import BackendUnavailableError, InvalidSettingsError, TopicNotFoundError
from runtime.redis._connection import Connection, node_url

__all__ = [
    "REDIS_SINK_OPTIONS", "REDIS_SOURCE_OPTIONS", "SINK_OPTIONS", "SOURCE_OPTIONS",
    "RedisSinkOptions", "RedisSourceOptions", "SinkOptions", "SourceOptions", "check_options",
    "read_authkey", "refuse_unknown", "uses_redis",
]

# Equal to a topic's default ack_timeout: a lease never outlives its deliveries' deadline
# on a topic with default settings.
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_PARTITIONS = 2
DEFAULT_MAX_TRIGGER_DELAY = 900.0  # seconds, as Kafka's maxTriggerDelay (15 min)
# A group has nothing older than the consumer's acked position: "earliest" is the same.
STARTING_POSITIONS = ("acked", "earliest")


def read_authkey(variable: str) -> bytes:
    """The key in environment variable ``variable`` (UTF-8; ``hex:`` prefix for hex).

    Raises:
        ValueError: the variable is unset or empty.
    """
    value = os.environ.get(variable, "")
    if not value:
        raise ValueError(f"actorbus: environment variable {variable!r} (authkey_env) is not set "
                         "in this process; export it before Spark starts its workers")
    return bytes.fromhex(value[4:]) if value.startswith("hex:") else value.encode()


# Options Spark itself may pass to a data source; never ours to refuse.
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})
_ENDPOINT_OPTIONS = frozenset({"address", "authkey_env", "topic"})
SOURCE_OPTIONS = _ENDPOINT_OPTIONS | {
    "redis", "group", "consumer", "max_messages_per_batch", "lease_seconds", "partitions",
    "fail_on_data_loss", "starting_position", "min_messages_per_batch", "max_trigger_delay",
}
SINK_OPTIONS = _ENDPOINT_OPTIONS | {"redis", "producer_id", "batch_id", "error_column"}
# With ``redis``: the options that apply to a Redis topic (the broker's leases do not).
REDIS_SOURCE_OPTIONS = frozenset({"redis", "topic", "group", "consumer", "max_messages_per_batch"})
REDIS_SINK_OPTIONS = frozenset({"redis", "topic", "producer_id", "batch_id", "error_column"})


def uses_redis(options: Mapping[str, str]) -> bool:
    """Whether the options name a Redis (option ``redis``, any case, not empty)."""
    return any(k.lower() == "redis" and v not in (None, "") for k, v in options.items())


def refuse_unknown(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """Refuse an option the format does not know (a typo would otherwise do nothing).

    Raises:
        InvalidSettingsError: naming the unknown options and the known ones.
    """
    unknown = sorted(k for k in options if k.lower() not in known | _SPARK_OPTIONS)
    if unknown:
        raise InvalidSettingsError(", ".join(unknown), (
            f"unknown option of the actorbus {what} (options are case-insensitive); "
            f"known: {', '.join(sorted(known))}"))


def check_options(
    options: Mapping[str, str], known: frozenset[str] = SOURCE_OPTIONS | SINK_OPTIONS,
    what: str = "format",
) -> dict[str, Any]:
    """Check every option Spark passed, before anything connects: unknown ones are
    refused, each value is parsed by its option's rule, the endpoint's are required.

    Returns the parsed values by lower-case name (an empty value is absent: the default).

    Raises:
        InvalidSettingsError: naming the option and the value (a `ValueError`).
    """
    refuse_unknown(options, known, what)
    values = _parsed(options)
    for key in sorted(_ENDPOINT_OPTIONS - set(values)):
        raise InvalidSettingsError(key, f"the actorbus {what} requires this option")
    return values


def check_redis_options(
    options: Mapping[str, str], known: frozenset[str], side: frozenset[str], what: str,
) -> dict[str, Any]:
    """`check_options` for a query on a Redis (option ``redis``): a broker option, or one
    that applies only to the broker's leases, is refused by name; ``topic`` is required.

    Raises:
        InvalidSettingsError: naming the option (and the value).
    """
    refuse_unknown(options, known | side, what)
    values = _parsed(options)
    for key in sorted(set(values) - known):
        detail = ("is a broker endpoint option: give either redis or address and authkey_env"
                  if key in _ENDPOINT_OPTIONS else
                  f"does not apply to a Redis topic; the actorbus {what} with redis takes "
                  f"{', '.join(sorted(known))}")
        raise InvalidSettingsError(key, detail)
    if "topic" not in values:
        raise InvalidSettingsError("topic", f"the actorbus {what} requires this option")
    return values


def _parsed(options: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, raw in options.items():
        key = name.lower()
        if key in _SPARK_OPTIONS or raw is None or str(raw) == "":
            continue
        values[key] = _RULES[key](key, str(raw))
    return values


def _text(name: str, raw: str) -> str:
    return raw


def _address(name: str, raw: str) -> Address:
    try:
        return parse_address(raw)
    except ValueError:
        raise InvalidSettingsError(name, f"must be 'host:port', got {raw!r}") from None


def _redis_url(name: str, raw: str) -> str:
    """A ``redis://``, ``rediss://`` or ``unix://`` URL redis-py can connect with, or a
    Redis Cluster's ``redis+cluster://`` / ``rediss+cluster://`` (any of its nodes)."""
    from redis.connection import parse_url

    url = raw.strip()
    try:
        parse_url(node_url(url)[0])  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise InvalidSettingsError(name, (
            "must be a redis://host:port/db, rediss:// or unix:// URL, or a cluster's "
            f"redis+cluster://host:port, got {_without_password(raw)!r} ({exc})")) from None
    return url


def _without_password(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part masked."""
    scheme, _, rest = url.partition("://")
    credentials, at, place = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.partition(':')[0]}:***@{place}"


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidSettingsError(name, f"must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _starting_position(name: str, raw: str) -> str:
    value = raw.strip().lower()
    if value == "latest":
        raise InvalidSettingsError(name, (
            "'latest' is not offered: a group keeps no copy of what it holds, so skipping "
            "its backlog would drop those messages; read them, or drain them with another "
            "consumer first"))
    if value not in STARTING_POSITIONS:
        raise InvalidSettingsError(
            name, f"must be one of {', '.join(STARTING_POSITIONS)}, got {raw!r}")
    return value


def _count(name: str, raw: str) -> int:
    """A whole number > 0."""
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidSettingsError(name, f"must be a whole number > 0, got {raw!r}") from None
    if value <= 0:
        raise InvalidSettingsError(name, f"must be > 0, got {raw!r}")
    return value


def _seconds(name: str, raw: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise InvalidSettingsError(name, f"must be a number of seconds > 0, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise InvalidSettingsError(name, f"must be > 0 and finite, got {raw!r}")
    return value


_RULES: dict[str, Callable[[str, str], object]] = {
    "address": _address, "authkey_env": _text, "topic": _text,
    "group": _text, "consumer": _text, "max_messages_per_batch": _count,
    "min_messages_per_batch": _count, "partitions": _count, "lease_seconds": _seconds,
    "max_trigger_delay": _seconds, "fail_on_data_loss": _flag,
    "starting_position": _starting_position,
    "producer_id": _text, "batch_id": _text, "error_column": _text, "redis": _redis_url,
}
assert set(_RULES) == SOURCE_OPTIONS | SINK_OPTIONS  # every option has its rule


@dataclass(frozen=True, slots=True, kw_only=True)
class _Endpoint:
    address: Address
    authkey_env: str
    topic: str

    def connect(self) -> Channel:
        """A fresh connection to the broker (in the calling process)."""
        return Channel(self.address, read_authkey(self.authkey_env))


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions(_Endpoint):
    """``spark.readStream.format("actorbus")`` options."""

    group: str
    consumer: str
    max_messages_per_batch: int | None
    lease_seconds: float
    partitions: int
    fail_on_data_loss: bool = True
    min_messages_per_batch: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's option strings (`check_options` of the source's).

        Raises:
            InvalidSettingsError: an unknown option, a required option is missing, or
                a value is malformed or out of range (named, with the value).
        """
        values = check_options(options, SOURCE_OPTIONS, "source")
        group = str(values.get("group", "spark"))
        return cls(
            address=values["address"],  # parsed by its rule, as every value here
            authkey_env=str(values["authkey_env"]),
            topic=str(values["topic"]),
            group=group,
            consumer=str(values.get("consumer", group)),
            max_messages_per_batch=values.get("max_messages_per_batch"),
            lease_seconds=float(values.get("lease_seconds", DEFAULT_LEASE_SECONDS)),
            partitions=int(values.get("partitions", DEFAULT_PARTITIONS)),
            fail_on_data_loss=bool(values.get("fail_on_data_loss", True)),
            min_messages_per_batch=values.get("min_messages_per_batch"),
            max_trigger_delay=float(values.get("max_trigger_delay", DEFAULT_MAX_TRIGGER_DELAY)),
        )

    @property
    def lease(self) -> tuple[str, str, str, float]:
        """The lease log's key and lease, as the broker's lease operations take them."""
        return self.topic, self.group, self.consumer, self.lease_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions(_Endpoint):
    """``df.write(Stream).format("actorbus")`` options."""

    producer_id: str | None
    batch_id: str | None
    error_column: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Validate Spark's option strings (`check_options` of the sink's).

        Raises:
            InvalidSettingsError: an unknown option, or a required option is missing.
        """
        values = check_options(options, SINK_OPTIONS, "sink")
        return cls(
            address=values["address"],
            authkey_env=str(values["authkey_env"]),
            topic=str(values["topic"]),
            producer_id=_optional(values, "producer_id"),
            batch_id=_optional(values, "batch_id"),
            error_column=_optional(values, "error_column"),
        )


def _optional(values: Mapping[str, Any], name: str) -> str | None:
    value = values.get(name)
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class _RedisTopic:
    redis: str
    topic: str

    def connect(self) -> Connection:
        """A fresh connection to the Redis (in the calling process; nothing sent yet)."""
        return Connection(self.redis)

    def check(self, connection: Connection, group: str | None = None) -> TopicSettings:
        """Check, on the driver, that the Redis answers and holds the topic (and
        ``group``); returns the settings the topic was declared with.

        Raises:
            InvalidSettingsError: naming ``redis`` (no answer), ``topic`` or ``group``.
        """
        from runtime.redis._declare import recorded_settings
        from runtime.redis._keys import TopicKeys

        try:
            settings = recorded_settings(connection, self.topic)
            with connection.guard():
                groups = None if group is None else {name.decode() for name in
                                                     connection.client.smembers(TopicKeys.of(self.topic).groups)}
        except BackendUnavailableError as exc:
            raise InvalidSettingsError("redis", f"{connection.url} did not answer: {exc}") from None
        except TopicNotFoundError:
            raise InvalidSettingsError("topic", (
                f"no topic {self.topic!r} on {connection.url} (create it with "
                "bus.create_topic(..., backend='redis'))")) from None
        if groups is not None and group not in groups:
            raise InvalidSettingsError("group", (
                f"topic {self.topic!r} on {connection.url} has no group {group!r} "
                f"(its groups: {', '.join(sorted(groups)) or 'none'}; create it with "
                "topic.create_group)"))
        return settings


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisSourceOptions(_RedisTopic):
    """``spark.readStream.format("actorbus").option("redis", url)`` options."""

    group: str
    consumer: str
    max_messages_per_batch: int | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RedisSourceOptions:
        """Validate Spark's option strings (nothing is sent to Redis).

        Raises:
            InvalidSettingsError: an unknown option, a broker option, a missing topic,
                or a malformed value (named, with the value).
        """
        values = check_redis_options(options, REDIS_SOURCE_OPTIONS, SOURCE_OPTIONS, "source")
        group = str(values.get("group", "spark"))
        return cls(redis=str(values["redis"]), topic=str(values["topic"]), group=group,
                   consumer=str(values.get("consumer", group)),
                   max_messages_per_batch=values.get("max_messages_per_batch"))


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisSinkOptions(_RedisTopic):
    """``df.write(Stream).format("actorbus").option("redis", url)`` options."""

    producer_id: str | None
    batch_id: str | None
    error_column: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RedisSinkOptions:
        """Validate Spark's option strings (nothing is sent to Redis).

        Raises:
            InvalidSettingsError: as `RedisSourceOptions.parse`.
        """
        values = check_redis_options(options, REDIS_SINK_OPTIONS, SINK_OPTIONS, "sink")
        return cls(redis=str(values["redis"]), topic=str(values["topic"]),
                   producer_id=_optional(values, "producer_id"),
                   batch_id=_optional(values, "batch_id"),
                   error_column=_optional(values, "error_column"))
