"""Helpers of the Spark tests: a quiet, fast local session and broker options.

Imported by the spark test modules only. Each module builds ONE session (a
module-scoped fixture) and stops it at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

KEY_ENV = "ACTORBUS_TEST_AUTHKEY"



def _missing() -> str | None:
    from runtime.cli._spark_session import spark_unavailable

    return spark_unavailable()


MISSING = _missing()
needs_spark = [
    pytest.mark.spark,
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
]


def authkey() -> bytes:
    """The broker key shared with Spark's workers through the environment.

    Set before the session starts: Spark's Python workers inherit the JVM's environment.
    """
    value = os.environ.get(KEY_ENV)
    if not value:
        value = secrets.token_hex(16)
        os.environ[KEY_ENV] = value
    return value.encode()


def spark_session(master: str = "local[2]") -> Iterator[Any]:
    """A quiet local session for one test module; stopped afterwards."""
    from runtime.cli._spark_session import local_session

    authkey()
    workdir = Path(tempfile.mkdtemp(prefix="actorbus-spark-"))
    spark = local_session(master, "actorbus-tests", workdir, **{
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stopTimeout": "10s",
    })
    try:
        yield spark
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def options(address: tuple[str, int], **extra: object) -> dict[str, str]:
    """``format("actorbus")`` options for the broker at ``address``."""
    base = {"address": f"{address[0]}:{address[1]}", "authkey_env": KEY_ENV}
    base.update({k: str(v) for k, v in extra.items()})
    return base


def publish(topic: Any, payloads: list[bytes]) -> None:
    """Publish ``payloads`` as `Message` objects with attribute ``n`` (their index)."""
    from runtime import Message

    topic._publish_batch([Message(data=p, attributes={"n": str(i)}) for i, p in enumerate(payloads)]
                         ).result(timeout=10)


def drain(topic: Any, group: str = "check") -> list[Any]:
    """Every message waiting in ``group``, acked.

    Reads as many as the topic has unsettled (``stats().pending``, all of them in
    ``group`` when it is the topic's one group), then takes any that is already there
    besides; where the count says more than ``group`` holds, it reads until a
    receive waits a second in vain.
    """
    from runtime.errors import WouldBlock

    expected = topic.stats().pending
    subscription = topic.subscription(group=group)
    out = []
    try:
        while True:
            try:
                delivery = subscription.receive_nowait()
            except WouldBlock:
                if len(out) >= expected:
                    return out
                delivery = subscription.receive(timeout=1.0)
            delivery.ack()
            out.append(delivery.message)
    except TimeoutError:
        return out
    finally:
        subscription.unsubscribe()


def finish(query: Any, timeout: float = 120) -> None:
    """Wait for a query with an ending trigger; stop it either way."""
    try:
        assert query.awaitTermination(timeout), "the query did not finish in time"
    finally:
        query.stop()
