"""Printing the results as a table (rich when it is installed, plain text otherwise) and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ._harness import Result

__all__ = ["format_number", "print_table", "verdict", "write_json"]

_HEADERS = ("scenario", "value", "unit", "baseline", "baseline value", "ratio", "target", "")


def format_number(value: float | None) -> str:
    """A figure with three significant digits (thousands separated), or ``-``."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def verdict(result: Result) -> str:
    """``ok``/``MISS`` against the target, or why there is no figure."""
    if result.error is not None:
        return f"failed: {result.error}"
    if result.skipped is not None:
        return f"skipped: {result.skipped}"
    if result.target is None or result.ratio is None:
        return ""
    return "ok" if result.ratio >= result.target else "MISS"


def _cells(result: Result) -> tuple[str, ...]:
    ratio = "-" if result.ratio is None else f"{result.ratio:.2f}"
    target = "-" if result.target is None else f">= {result.target:g}"
    return (result.name, format_number(result.value), result.unit, result.baseline,
            format_number(result.baseline_value), ratio, target, verdict(result))


def print_table(results: Sequence[Result], out: TextIO, *, title: str) -> None:
    """Print one row per result to ``out``."""
    rows = [_cells(result) for result in results]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        _print_plain(rows, out, title)
        return
    table = Table(title=title)
    for index, header in enumerate(_HEADERS):
        numeric = index in (1, 4, 5)
        table.add_column(header, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*row)
    Console(file=out, width=160).print(table)


def _print_plain(rows: list[tuple[str, ...]], out: TextIO, title: str) -> None:
    widths = [max(len(row[i]) for row in [_HEADERS, *rows]) for i in range(len(_HEADERS))]
    out.write(f"{title}\n")
    for row in [_HEADERS, *rows]:
        cells = [cell.rjust(width) if i in (1, 4, 5) else cell.ljust(width)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=True))]
        out.write("  ".join(cells).rstrip() + "\n")


def write_json(results: Sequence[Result], path: Path) -> None:
    """Write ``{"results": [...]}`` to ``path``."""
    document = {"results": [result.to_json() for result in results]}
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
