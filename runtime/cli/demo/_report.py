"""What the demo shows: its progress bars and the summary table (rendered with rich)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from runtime.cli.demo._spark import SparkSummary

__all__ = ["DemoReport", "progress_bars", "summary_table"]


@dataclass(slots=True, kw_only=True)
class DemoReport:
    """The demo's figures, and the checks that decide its exit code."""

    messages: int
    published: int = 0
    delivered: int = 0
    pending: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    dead_lettered_messages: int = 0
    expected_invalid: int = 0
    audited: int = 0
    workers: int = 0
    seconds: float = 0.0
    publish_seconds: float = 0.0
    spark: SparkSummary | None = None
    spark_skipped: str | None = None
    revenue_rows: int = 0
    revenue_matches: bool | None = None

    def problems(self) -> list[str]:
        """Every check that failed, as one line each (empty: the counts add up)."""
        checks = {
            f"published {self.published} of {self.messages}": self.published == self.messages,
            f"{self.pending} messages still pending": self.pending == 0,
            f"delivered {self.delivered} + dead-lettered {self.dead_lettered_messages} "
            f"!= published {self.published}":
                self.delivered + self.dead_lettered_messages == self.published,
            f"dead-lettered {self.dead_lettered_messages}, expected {self.expected_invalid} "
            "invalid orders": self.dead_lettered_messages == self.expected_invalid,
            f"audit saw {self.audited} of {self.published}": self.audited == self.published,
            "Spark's revenue per customer differs from the orders": self.revenue_matches is not False,
        }
        return [text for text, ok in checks.items() if not ok]


def progress_bars(console: Console) -> Progress:
    """The bars shown while the pipeline runs."""
    return Progress(
        TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console)


def summary_table(report: DemoReport) -> Table:
    """The closing table: counts, dead letters by reason, throughput, Spark."""
    table = Table(title="actorbus demo", show_header=True, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("orders published", f"{report.published:,}")
    table.add_row("delivered (every destination acked)", f"{report.delivered:,}")
    table.add_row("seen by audit (broadcast)", f"{report.audited:,}")
    table.add_row("dead letters", f"{sum(report.dead_letters.values()):,}")
    for reason, count in sorted(report.dead_letters.items()):
        table.add_row(f"  {reason}", f"{count:,}")
    table.add_row("still pending", f"{report.pending:,}")
    table.add_row("publish rate (batched Publisher)", _rate(report.published, report.publish_seconds))
    scope = "Spark included" if report.spark is not None else f"{report.workers} billing workers"
    table.add_row(f"end to end ({scope})", _rate(report.published, report.seconds))
    if report.spark is not None:
        table.add_row("Spark rows in (orders)", f"{report.spark.rows_in:,}")
        table.add_row("Spark rows out (revenue)", f"{report.spark.rows_out:,}")
        table.add_row("Spark query", f"{report.spark.seconds:.1f} s")
        table.add_row("revenue matches the orders", "yes" if report.revenue_matches else "NO")
    else:
        table.add_row("Spark stage", "skipped")
    return table


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f} orders/s" if seconds > 0 else "-"
