"""``actorbus demo``: an order pipeline end to end on the embedded defaults.

A Publisher feeds topic ``orders``; group ``billing`` bills on a process pool, the
broadcast subscriber ``audit`` reads everything, invalid orders are nacked into the
dead letters, and (with Java and pyspark) a Spark Structured Streaming query reads
group ``analytics`` through the broker endpoint and writes revenue per customer to
topic ``revenue``. The exit code is 0 only when every order was acked or dead-lettered.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import Future
from typing import Any

from rich.console import Console

from runtime.cli._spark_session import spark_unavailable
from runtime.cli.demo._orders import expected_revenue, invalid_reason, make_orders
from runtime.cli.demo._pipeline import DemoPipeline
from runtime.cli.demo._report import DemoReport, progress_bars, summary_table
from runtime.cli.demo._spark import SparkStage
from runtime.core._bus import Bus
from runtime.core._settings import TopicSettings

__all__ = ["run_demo"]


def run_demo(
    *, messages: int = 2000, workers: int | None = None, spark: bool = True,
    console: Console | None = None, redis: str | None = None,
) -> int:
    """Run the pipeline with ``messages`` orders; print progress and a summary.

    With ``redis`` (a URL) the topics are ``backend="redis"`` topics of that Redis, named
    for this run and destroyed after it; the Spark stage (which reads through the broker
    endpoint of an in-memory bus) is skipped.

    Blocks until every order settled (at most a few minutes). Returns the exit code:
    0 when the counts add up, 1 otherwise.
    """
    console = console or Console()
    workers = workers or os.cpu_count() or 1
    orders = make_orders(messages)
    skipped = ("--no-spark was given" if not spark else
               "the demo's Spark stage reads an in-memory bus (not --redis)" if redis else
               spark_unavailable())
    if skipped is not None:
        console.print(f"Spark stage skipped: {skipped}", soft_wrap=True)
    report = DemoReport(
        messages=messages, workers=workers, spark_skipped=skipped,
        expected_invalid=sum(invalid_reason(_fields(o)) is not None for o in orders))
    stage = None if skipped is not None else SparkStage()
    if stage is not None:
        console.print("Starting Spark (local[*]) in the background: the first query takes a few seconds.",
                      soft_wrap=True)
    try:
        if stage is not None:
            stage.start()
        _run(report, orders, stage, console, redis)
    except (RuntimeError, TimeoutError) as exc:
        console.print(f"[red]demo failed:[/red] {exc}", soft_wrap=True)
        return 1
    finally:
        if stage is not None:
            stage.close()
    console.print(summary_table(report))
    return _verdict(report, console)


def _run(report: DemoReport, orders: list[Any], stage: SparkStage | None, console: Console,
         redis: str | None) -> None:
    started = time.perf_counter()
    defaults = TopicSettings(backend="redis") if redis else None
    prefix = f"actorbus-demo-{uuid.uuid4().hex[:8]}-" if redis else ""
    with Bus(redis=redis, defaults=defaults) as bus:
        pipeline = DemoPipeline(bus, workers=report.workers, analytics=stage is not None,
                                console=console, capacity=len(orders), prefix=prefix)
        try:
            _drive(report, orders, stage, pipeline, progress_bars(console), started, bus)
        finally:
            if redis:
                pipeline.destroy()


def _drive(report: DemoReport, orders: list[Any], stage: SparkStage | None,
           pipeline: DemoPipeline, bars: Any, started: float, bus: Bus) -> None:
    with bars as progress:
        pipeline.publish(orders, progress)
        report.publish_seconds = time.perf_counter() - started
        query: Future[Any] | None = None
        if stage is not None:
            query = stage.run(bus, source="orders", group="analytics", sink="revenue")
        pipeline.wait(progress, len(orders), query)
    report.seconds = time.perf_counter() - started
    if query is not None:
        report.spark = query.result()
        report.revenue_matches = pipeline.revenue == expected_revenue(orders)
    pipeline.fill(report)


def _verdict(report: DemoReport, console: Console) -> int:
    problems = report.problems()
    for problem in problems:
        console.print(f"[red]check failed:[/red] {problem}")
    if not problems:
        console.print("all counts add up: every order was acked or dead-lettered with a reason")
    return 0 if not problems else 1


def _fields(order: Any) -> dict[str, Any]:
    return {"amount_cents": order.amount_cents, "currency": order.currency, "items": order.items}
