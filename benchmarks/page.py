"""The documentation's benchmark page, generated from one ``python -m benchmarks --json`` run.

``python -m benchmarks.page RESULTS.json PAGE.md CHART.svg`` writes a Markdown page (the
results table, the machine, the method, how to reproduce) and a chart of every row's ratio
against its baseline with its target drawn. The page links the chart by a path relative to
the page, so both can live anywhere under ``docs/``.

The JSON holds only the rows (see `benchmarks._report.write_json`); what the rows cannot
say, the profile and the machine, comes from the command line (``--profile``, ``--machine``;
the machine defaults to a description of the host the command runs on).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from ._harness import Result
from ._report import format_number, verdict

__all__ = ["describe_machine", "load_results", "main", "render_chart", "render_page"]

_COLUMNS = ("scenario", "value", "unit", "baseline", "baseline value", "ratio", "target", "")
_OK, _MISS, _PLAIN = "#2e7d32", "#c62828", "#546e7a"


def load_results(path: Path) -> list[Result]:
    """The rows of a ``--json`` file, in the order the run printed them.

    Raises:
        ValueError: the file is not a results document (no ``results`` list, or a row
            without the documented keys).
    """
    document = json.loads(path.read_text(encoding="utf-8"))
    rows = document.get("results") if isinstance(document, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected an object with a 'results' list")
    try:
        return [Result(**row) for row in rows]
    except TypeError as exc:
        raise ValueError(f"{path}: a row does not have the documented keys ({exc})") from None


def describe_machine() -> str:
    """This host in one line: CPU model, logical CPUs, memory, OS and Python."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = ""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages * page_size / 2**30:.0f} GiB RAM"
    except (OSError, ValueError, AttributeError):
        pass
    return (f"{model}, {os.cpu_count()} logical CPUs{memory}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def _charted(results: Sequence[Result]) -> list[Result]:
    return [result for result in results if result.ratio is not None and result.ratio > 0]


def render_chart(results: Sequence[Result], path: Path, *, title: str) -> None:
    """Draw each row's ratio as a bar (log scale, 1 = the baseline), its target as a tick.

    Bars that meet their target are green, misses red, rows without a target grey.
    The SVG carries no date and stable ids, so the same results give the same file.

    Raises:
        ValueError: no row has a ratio to draw.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _charted(results)
    if not rows:
        raise ValueError("no row has a ratio to chart")
    matplotlib.rcParams["svg.hashsalt"] = "actorbus-benchmarks"
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small and searchable
    figure, axes = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4))
    positions = range(len(rows))
    colours = [_colour(row) for row in rows]
    axes.barh(list(positions), [row.ratio or 0 for row in rows], color=colours, height=0.6)
    for position, row in zip(positions, rows, strict=True):
        if row.target is not None:
            axes.plot([row.target, row.target], [position - 0.4, position + 0.4], color="black",
                      linewidth=2)
    axes.axvline(1.0, color="#9e9e9e", linestyle="--", linewidth=1)
    axes.set_xscale("log")
    axes.set_yticks(list(positions), [row.name for row in rows], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("ratio to the baseline (higher is better; black tick: target; dashed: 1)")
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(figure)


def _colour(result: Result) -> str:
    if result.target is None or result.ratio is None:
        return _PLAIN
    return _OK if result.ratio >= result.target else _MISS


def _cells(result: Result) -> tuple[str, ...]:
    ratio = "-" if result.ratio is None else f"{result.ratio:.2f}"
    target = "-" if result.target is None else f">= {result.target:g}"
    return (f"`{result.name}`", format_number(result.value), result.unit, result.baseline,
            format_number(result.baseline_value), ratio, target, verdict(result))


def _table(results: Sequence[Result]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    separator = "|" + "|".join("---:" if i in (1, 4, 5) else "---" for i in range(len(_COLUMNS))) + "|"
    return "\n".join([line(_COLUMNS), separator, *(line(_cells(result)) for result in results)])


def render_page(results: Sequence[Result], *, chart: str, profile: str, machine: str,
                note: str | None = None) -> str:
    """The Markdown page: summary, chart, table, method and how to reproduce.

    Args:
        results: the rows of one run.
        chart: the chart's path relative to the page.
        profile: the run's profile (``full``, ``quick`` or ``smoke``).
        machine: the machine the run measured, in one line.
        note: an extra sentence about the run (for example that the host was shared).
    """
    targeted = [r for r in results if r.target is not None and r.ratio is not None]
    met = sum(1 for r in targeted if r.ratio is not None and r.target is not None and r.ratio >= r.target)
    flag = "" if profile == "full" else f" --{profile}"
    run = f"`python -m benchmarks{flag} --json results.json`"
    caveat = f" {note}" if note else ""
    return f"""# Benchmarks

Each scenario measures one thing actorbus does next to the baseline a user would otherwise
write, **in the same run**, and reports their ratio, oriented so that higher is better (for
latencies and sizes the ratio is the baseline's figure over ours). A ratio of 1 is the
baseline's speed; the target is the ratio aimed for. Rows whose name has a suffix
(`pipeline_pool/queue`) compare the same path with another baseline or a practical limit.

!!! info "This run"
    Profile **{profile}** ({run}) on {machine}.{caveat}
    {met} of the {len(targeted)} rows with a target met it.

![Each scenario's ratio against its baseline, with its target]({chart})

Green: the target is met; red: missed; grey: a report-only row without a target. The scale is
logarithmic; the dashed line is the baseline's own speed.

{_table(results)}

## Method

- **Side by side.** The candidate and its baseline run in the same process tree, in
  alternating rounds (A B, then B A, ...) after one discarded warm-up round each, and each
  side's median round is compared. Machine noise that lasts longer than a round hits both
  sides alike; the ratio is what carries over to another machine, not the absolute figures.
- **Baselines.** What a user would write without actorbus: bare pykka for thread actors, a
  raw `multiprocessing.Pipe` for process actors, `multiprocessing.Pool` and
  `ProcessPoolExecutor` for fan-out, hand-written queue loops as the practical limit, a
  discarding writer for the Spark rows.
- **Collector.** A full garbage collection runs before every round, so one side does not pay
  for the other's garbage; during a round the collector stays on, as in an application.
- **Profiles.** `full` (9 rounds per side, full sizes), `--quick` (7 rounds, a quarter of the
  sizes, about 9 minutes on 2 cores) and `--smoke` (tiny sizes: checks that every scenario
  runs; its figures mean little). Quick runs are noisier than full ones.
- **Skips and failures.** A scenario that cannot run here (no Java, no pyspark) is a row with
  the reason; one that fails is a row with the error. Neither stops the run.
- **The traced path.** `python -m benchmarks.trace topic|publisher [--list] [--json]` counts
  the library functions, files and threads one message runs through in the parent (a
  `topic.publish` to a worker group and its outcome; a `Publisher.publish` to its confirmed
  future): the size of the path a maintainer reads, beside its speed.

## Reproduce

```bash
pip install -e '.[spark,docs,bench]'
{run.strip("`")}            # or: actorbus bench{flag} --json results.json
python -m benchmarks --list                             # the scenarios
python -m benchmarks --only pipeline_pool latency       # a few of them
python -m benchmarks.page results.json docs/benchmarks.md docs/img/ratios.svg --profile {profile}
```

Run on an otherwise idle machine for figures worth comparing; the page names the machine it
was generated on.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.page``: write the page and the chart; 0 on success, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.page",
        description="Write the benchmark page and its chart from a 'python -m benchmarks --json' file.")
    parser.add_argument("results", type=Path, help="the JSON written by python -m benchmarks --json")
    parser.add_argument("page", type=Path, help="the Markdown page to write")
    parser.add_argument("chart", type=Path, help="the chart to write (.svg or .png)")
    parser.add_argument("--profile", default="full", choices=("full", "quick", "smoke"),
                        help="the profile the run used (default full)")
    parser.add_argument("--machine", default=None, help="the machine, in one line (default: this host)")
    parser.add_argument("--note", default=None, help="one more sentence about the run")
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results)
        render_chart(results, args.chart, title=f"actorbus vs baselines ({args.profile} run)")
    except (OSError, ValueError) as exc:
        print(f"python -m benchmarks.page: {exc}", file=sys.stderr)
        return 2
    chart = os.path.relpath(args.chart, args.page.parent).replace(os.sep, "/")
    text = render_page(results, chart=chart, profile=args.profile,
                       machine=args.machine or describe_machine(), note=args.note)
    args.page.parent.mkdir(parents=True, exist_ok=True)
    args.page.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
