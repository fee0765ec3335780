"""The demo's Spark stage: revenue per customer from group ``analytics``, into ``revenue``.

pyspark is imported only inside this stage's functions, so ``import runtime`` and a
``--no-spark`` demo never load it. The session starts on a background thread while
the bus stage runs (a JVM takes seconds to start); the query then reads the backlog
of group ``analytics`` through the broker endpoint with ``trigger(availableNow=True)``.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.cli.demo._orders import CURRENCIES

__all__ = ["SparkStage", "SparkSummary"]

KEY_ENV = "ACTORBUS_DEMO_AUTHKEY"
ORDER_SCHEMA = "order_id long, customer string, amount_cents long, currency string, items int"
QUERY_TIMEOUT = 180.0
# Longest wait for Spark's listeners to see a finished query's last events.
LISTENER_WAIT = 10.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkSummary:
    """What the Spark stage did: orders read, revenue rows written, wall time."""

    rows_in: int
    rows_out: int
    seconds: float


class SparkStage:
    """A local Spark session and one streaming query, on one thread the stage owns.

    The session and the query share that thread: a streaming sink is looked up through
    the JVM's thread-local active session. Call `start`, later `run`, always `close`.
    """

    def __init__(self, *, master: str = "local[*]") -> None:
        self._master = master
        self._workdir = Path(tempfile.mkdtemp(prefix="actorbus-demo-"))
        self._session: Any = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="actorbus-demo-spark")

    def start(self) -> None:
        """Start the session in the background; returns at once."""
        os.environ.setdefault(KEY_ENV, secrets.token_hex(16))  # workers inherit it at JVM start
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        self._thread.submit(self._build)

    def run(self, bus: Any, *, source: str, group: str, sink: str) -> Future[SparkSummary]:
        """Serve ``bus`` and aggregate ``source``/``group`` into ``sink``, in the background.

        The future fails with the session's error, or with `RuntimeError` when the query
        did not finish within ``QUERY_TIMEOUT`` seconds.
        """
        return self._thread.submit(self._run, bus, source, group, sink)

    def close(self) -> None:
        """Stop the session (after what runs finished) and remove temporary files."""
        self._thread.submit(self._stop)
        self._thread.shutdown(wait=True)
        shutil.rmtree(self._workdir, ignore_errors=True)

    def _build(self) -> None:
        from runtime.cli._spark_session import local_session
        from runtime.spark import register

        session = local_session(self._master, "actorbus-demo", self._workdir)
        register(session)
        self._session = session

    def _run(self, bus: Any, source: str, group: str, sink: str) -> SparkSummary:
        if self._session is None:
            raise RuntimeError("the Spark session did not start")
        started = time.perf_counter()
        with bus.serve(("127.0.0.1", 0), authkey=os.environ[KEY_ENV].encode()) as server:
            query = self._query(f"{server.address[0]}:{server.address[1]}", source, group, sink)
            try:
                if not query.awaitTermination(QUERY_TIMEOUT):
                    raise RuntimeError(f"the Spark query did not finish within {QUERY_TIMEOUT:.0f}s")
            finally:
                query.stop()
                self._await_listeners()
            progress = query.recentProgress
        return SparkSummary(
            rows_in=sum(int(p["numInputRows"]) for p in progress),
            rows_out=sum(int(p["sink"].get("numOutputRows", 0) or 0) for p in progress),
            seconds=time.perf_counter() - started)

    def _await_listeners(self) -> None:
        """Wait (at most `LISTENER_WAIT` s) until Spark handed its listeners every event.

        Spark posts a query's last progress event before ``awaitTermination`` returns but
        hands it to listeners later, on its own thread: the progress listener's ack of the
        last batch then found the broker closed and logged "could not ack a committed
        batch" at the end of every demo. ``waitUntilEmpty`` is Spark's own (JVM side, not
        in PySpark's API), so a Spark without it only skips the wait.
        """
        try:
            self._session.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(
                int(LISTENER_WAIT * 1000))
        except Exception as exc:  # py4j errors: no such method, or the wait timed out
            logger.debug("could not wait for Spark's listener bus: %s", exc)

    def _stop(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None

    def _query(self, address: str, source: str, group: str, sink: str) -> Any:
        from pyspark.sql import functions as F

        endpoint = {"address": address, "authkey_env": KEY_ENV}
        orders = (
            self._session.readStream.format("actorbus")
            .options(**endpoint, topic=source, group=group, consumer="demo").load()
            .select(F.from_json(F.col("payload").cast("string"), ORDER_SCHEMA).alias("o"))
            .select("o.*")
            .where((F.col("amount_cents") > 0) & F.col("currency").isin(*CURRENCIES)
                   & (F.col("items") > 0)))
        revenue = orders.groupBy("customer").agg(
            F.sum("amount_cents").alias("revenue_cents"), F.count("*").alias("orders"))
        rows = revenue.select(
            F.to_json(F.struct("customer", "revenue_cents", "orders")).alias("payload"),
            F.col("customer").alias("key"))
        return (
            rows.writeStream.format("actorbus").options(**endpoint, topic=sink)
            .outputMode("complete").option("checkpointLocation", str(self._workdir / "checkpoint"))
            .trigger(availableNow=True).start())
