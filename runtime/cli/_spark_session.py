"""A quiet local SparkSession for the demo, the measurements and the tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

__all__ = ["local_session", "spark_unavailable"]

_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def spark_unavailable() -> str | None:
    """Why Spark cannot run here (one line), or None when it can."""
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        return "pyspark and pyarrow are not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java was not found (install Java 17 or set JAVA_HOME)"
    return None


def local_session(master: str, app_name: str, workdir: Path, **config: str) -> Any:
    """A local SparkSession with its logs down to errors and the UI off.

    Spark's Python workers run ``PYSPARK_PYTHON`` (default: ``python3`` on PATH); it is
    set to this interpreter so they import the same packages. ``workdir`` holds the
    log4j configuration; ``config`` adds or overrides Spark settings. Blocks while the
    JVM starts (a few seconds). The caller stops the session.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log4j = workdir / "log4j2.properties"
    log4j.write_text(_QUIET_LOG4J)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{log4j}",
        **config,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
