"""The options of the ``actorbus`` format, read once and carried as a frozen value.

Spark hands a data source its options as strings in a case-insensitive mapping. The
authkey never appears there: ``authkey_env`` names the environment variable holding
it, read in each process that connects (driver runner, executor task, commit worker),
so keys never sit in query plans or logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.broker._client import Address, Channel, parse_address

__all__ = ["SINK_OPTIONS", "SOURCE_OPTIONS", "SinkOptions", "SourceOptions", "read_authkey", "refuse_unknown"]

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
    "group", "consumer", "max_messages_per_batch", "lease_seconds", "partitions",
    "fail_on_data_loss", "starting_position", "min_messages_per_batch", "max_trigger_delay",
}
SINK_OPTIONS = _ENDPOINT_OPTIONS | {"producer_id", "batch_id", "error_column"}


def refuse_unknown(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """Refuse an option the format does not know (a typo would otherwise do nothing).

    Raises:
        ValueError: naming the unknown options and the known ones.
    """
    unknown = sorted(k for k in options if k.lower() not in known | _SPARK_OPTIONS)
    if unknown:
        raise ValueError(f"actorbus {what}: unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(sorted(known))}")


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"actorbus: option {name!r} must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _starting_position(options: Mapping[str, str]) -> str:
    value = str(options.get("starting_position") or "acked").strip().lower()
    if value == "latest":
        raise ValueError(
            "actorbus: starting_position 'latest' is not offered: a group keeps no copy of "
            "what it holds, so skipping its backlog would drop those messages; read them, or "
            "drain them with another consumer first")
    if value not in STARTING_POSITIONS:
        raise ValueError(f"actorbus: option 'starting_position' must be one of "
                         f"{', '.join(STARTING_POSITIONS)}, got {options.get('starting_position')!r}")
    return value


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name)
    if not value:
        raise ValueError(f"actorbus: option {name!r} is required")
    return str(value)


def _positive(options: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    value = float(raw)
    if value <= 0:
        raise ValueError(f"actorbus: option {name!r} must be > 0, got {raw!r}")
    return value


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
        """Validate Spark's option strings.

        Raises:
            ValueError: an unknown option, a required option is missing, or a value is
                out of range.
        """
        refuse_unknown(options, SOURCE_OPTIONS, "source")
        group = options.get("group") or "spark"
        limit = _positive(options, "max_messages_per_batch", None)
        least = _positive(options, "min_messages_per_batch", None)
        _starting_position(options)
        return cls(
            address=parse_address(_required(options, "address")),
            authkey_env=_required(options, "authkey_env"),
            topic=_required(options, "topic"),
            group=group,
            consumer=options.get("consumer") or group,
            max_messages_per_batch=None if limit is None else int(limit),
            lease_seconds=_positive(options, "lease_seconds", DEFAULT_LEASE_SECONDS) or 0.0,
            partitions=int(_positive(options, "partitions", DEFAULT_PARTITIONS) or 1),
            fail_on_data_loss=_flag(options, "fail_on_data_loss", True),
            min_messages_per_batch=None if least is None else int(least),
            max_trigger_delay=_positive(options, "max_trigger_delay", DEFAULT_MAX_TRIGGER_DELAY)
            or DEFAULT_MAX_TRIGGER_DELAY,
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
        """Validate Spark's option strings.

        Raises:
            ValueError: an unknown option, or a required option is missing.
        """
        refuse_unknown(options, SINK_OPTIONS, "sink")
        return cls(
            address=parse_address(_required(options, "address")),
            authkey_env=_required(options, "authkey_env"),
            topic=_required(options, "topic"),
            producer_id=options.get("producer_id") or None,
            batch_id=options.get("batch_id") or None,
            error_column=options.get("error_column") or None,
        )
