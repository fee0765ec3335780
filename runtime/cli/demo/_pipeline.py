"""The demo's pipeline on one bus: topics, subscribers, the publisher and the waits.

``orders`` (JSON bytes, ordering key = customer) fans out to group ``billing`` (a
process pool), the broadcast subscriber ``audit`` and, with Spark, group ``analytics``
(read by Spark through the broker). Spark writes to ``revenue``, printed by its subscriber.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import Future, wait
from typing import Any

from rich.console import Console
from rich.progress import Progress

from runtime.cli.demo._orders import Order, bill
from runtime.cli.demo._report import DemoReport
from runtime.core._bus import Bus
from runtime.core.settlement._delivery import Delivery
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl

__all__ = ["DemoPipeline"]

REFRESH = 0.1  # seconds between progress refreshes while waiting
SETTLE_TIMEOUT = 300.0


class DemoPipeline:
    """Topics ``orders`` and ``revenue`` with their subscribers, on ``bus``.

    Args:
        bus: the bus to build on (the caller closes it).
        workers: billing's worker processes.
        analytics: create group ``analytics`` (only when Spark will read it, or its
            messages would wait forever).
        console: where the revenue lines are printed.
        capacity: queue and ring size; the demo holds its whole backlog for Spark.
        prefix: put before the topic names (a Redis run's own names).
    """

    def __init__(self, bus: Bus, *, workers: int, analytics: bool, console: Console, capacity: int,
                 prefix: str = "") -> None:
        self._console = console
        self._lock = threading.Lock()
        self.audited = 0
        self.revenue: dict[str, int] = {}
        self.revenue_rows = 0
        size = max(128, capacity)
        self.orders = bus.create_topic(
            f"{prefix}orders", ack_timeout=120.0, balanced_capacity=size, broadcast_capacity=size)
        self.revenue_topic = bus.create_topic(f"{prefix}revenue", ack_timeout=30.0,
                                              broadcast_capacity=size)
        self.orders.subscribe(bill, group="billing", workers=workers)
        self.orders.subscribe(self._audit, auto_ack=True)
        if analytics:
            self.orders.create_group("analytics")
        self.revenue_topic.subscribe(self._print_revenue, auto_ack=True)

    def publish(self, orders: list[Order], progress: Progress) -> list[Future[str]]:
        """Publish every order through a batching, ordered Publisher; returns the futures."""
        task = progress.add_task("orders published", total=len(orders))
        publisher = self.orders.publisher(
            batching=BatchSettings(max_messages=100, max_bytes=1024 * 1024, max_latency=0.010),
            flow_control=FlowControl(max_outstanding_messages=1000, limit_exceeded="block"),
            message_ordering=True)
        futures = []
        for order in orders:
            future = publisher.publish(order.encode(), ordering_key=order.customer,
                                       attributes={"currency": order.currency})
            future.add_done_callback(lambda _: progress.advance(task))
            futures.append(future)
        publisher.close(timeout=SETTLE_TIMEOUT)
        return futures

    def wait(self, progress: Progress, total: int, spark: Future[Any] | None) -> None:
        """Refresh the settled bar until every order settled and Spark (if any) finished.

        Raises:
            TimeoutError: orders still pending after ``SETTLE_TIMEOUT`` seconds.
        """
        task = progress.add_task("orders settled", total=total)
        spark_task = None if spark is None else progress.add_task("spark query", total=1)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            spark_done = _finished(spark, 0.0)  # raises at once when the query failed
            if self.orders.join(timeout=REFRESH) and (spark_done or _finished(spark, REFRESH)):
                break
            stats = self.orders.stats()
            progress.update(task, completed=stats.published - stats.pending)
            if time.monotonic() > deadline:
                raise TimeoutError(f"orders still pending after {SETTLE_TIMEOUT:.0f}s")
        progress.update(task, completed=total)
        if spark_task is not None:
            progress.update(spark_task, completed=1)
        self.revenue_topic.join(timeout=SETTLE_TIMEOUT)

    def fill(self, report: DemoReport) -> None:
        """Copy the topic figures and the dead letters into ``report``."""
        stats = self.orders.stats()
        report.published, report.delivered, report.pending = stats.published, stats.delivered, stats.pending
        letters = list(self.orders.dead_letters)
        report.dead_letters = Counter(f"{d.reason}: {d.error}" if d.error else d.reason for d in letters)
        report.dead_lettered_messages = len({d.message_id for d in letters})
        report.audited = self.audited
        report.revenue_rows = self.revenue_rows

    def destroy(self) -> None:
        """Delete the topics from their backend (a Redis run cleans up after itself)."""
        for topic in (self.orders, self.revenue_topic):
            destroy = getattr(topic, "destroy", None)
            if destroy is not None:
                destroy()

    def _audit(self, delivery: Delivery[Any]) -> None:
        json.loads(delivery.message.data)  # an auditor reads every order, valid or not
        with self._lock:
            self.audited += 1

    def _print_revenue(self, delivery: Delivery[Any]) -> None:
        row = json.loads(delivery.message.data)
        with self._lock:
            self.revenue[row["customer"]] = int(row["revenue_cents"])
            self.revenue_rows += 1
        self._console.print(
            f"  revenue  {row['customer']}  {row['revenue_cents'] / 100:>12,.2f}  ({row['orders']} orders)")



def _finished(spark: Future[Any] | None, timeout: float) -> bool:
    """True when there is no Spark stage or it ended; raises when it failed."""
    if spark is None:
        return True
    wait([spark], timeout=timeout)
    if not spark.done():
        return False
    error = spark.exception()
    if error is not None:
        raise RuntimeError(f"the Spark stage failed: {error}") from error
    return True
