"""Helpers of the Spark tests: a quiet, fast local session and broker options.

Imported by the spark test modules only. Each module builds ONE session (a
module-scoped fixture) and stops it at the end.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

KEY_ENV = "ACTORBUS_TEST_AUTHKEY"

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        return "pyspark and pyarrow are not installed (pip install actorbus[spark])"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed (Spark needs a JVM: set JAVA_HOME or put java on PATH)"
    return None


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
    from pyspark.sql import SparkSession

    authkey()
    # Spark's Python workers run PYSPARK_PYTHON (default: python3 on PATH), not this venv.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="actorbus-spark-"))
    log4j = workdir / "log4j2.properties"
    log4j.write_text(_LOG4J)
    spark = (
        SparkSession.builder.master(master).appName("actorbus-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log4j}")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
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
