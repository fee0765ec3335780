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

__all__ = ["SinkOptions", "SourceOptions", "read_authkey"]

DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_PARTITIONS = 2
DEFAULT_FETCH_ROWS = 20_000


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

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's option strings.

        Raises:
            ValueError: a required option is missing or a number is out of range.
        """
        group = options.get("group") or "spark"
        limit = _positive(options, "max_messages_per_batch", None)
        return cls(
            address=parse_address(_required(options, "address")),
            authkey_env=_required(options, "authkey_env"),
            topic=_required(options, "topic"),
            group=group,
            consumer=options.get("consumer") or group,
            max_messages_per_batch=None if limit is None else int(limit),
            lease_seconds=_positive(options, "lease_seconds", DEFAULT_LEASE_SECONDS) or 0.0,
            partitions=int(_positive(options, "partitions", DEFAULT_PARTITIONS) or 1),
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
            ValueError: a required option is missing.
        """
        return cls(
            address=parse_address(_required(options, "address")),
            authkey_env=_required(options, "authkey_env"),
            topic=_required(options, "topic"),
            producer_id=options.get("producer_id") or None,
            batch_id=options.get("batch_id") or None,
            error_column=options.get("error_column") or None,
        )
