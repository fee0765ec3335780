"""The suite: every scenario in one tuple, and the command line that runs them.

``python -m benchmarks [--quick | --smoke] [--only NAME ...] [--json PATH] [--list]``
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import (
    _cpu_scaling,
    _fanout,
    _latency,
    _memory,
    _pinned,
    _pipeline,
    _pipeline_pool,
    _process_actors,
    _publisher_batching,
    _redis_fanout,
    _redis_partitions,
    _redis_pipeline,
    _spark,
    _thread_actors,
    _tuned,
)
from ._harness import PROFILES, Profile, Result, Scenario
from ._report import print_table, write_json

__all__ = ["SCENARIOS", "main"]

SCENARIOS: tuple[Scenario, ...] = (
    *_thread_actors.SCENARIOS,
    *_process_actors.SCENARIOS,
    *_cpu_scaling.SCENARIOS,
    *_pipeline.SCENARIOS,
    *_pipeline_pool.SCENARIOS,
    *_tuned.SCENARIOS,
    *_pinned.SCENARIOS,
    *_cpu_scaling.FANOUT_SCENARIOS,
    *_fanout.SCENARIOS,
    *_publisher_batching.SCENARIOS,
    *_latency.SCENARIOS,
    *_memory.SCENARIOS,
    *_redis_pipeline.SCENARIOS,
    *_redis_partitions.SCENARIOS,
    *_redis_fanout.SCENARIOS,
    *_spark.SCENARIOS,
)
"""Every scenario, in the order they run and print."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run actorbus next to its baselines, in the same run, and compare.")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes (about 9 minutes on 2 cores)")
    size.add_argument("--smoke", action="store_true",
                      help="tiny sizes: checks that every scenario runs; figures mean little")
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=[],
                        help="run only these scenarios")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results here")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return parser


def _select(names: Sequence[str]) -> tuple[Scenario, ...]:
    """The scenarios named (all when none is), in suite order.

    Raises:
        ValueError: a name is not a scenario.
    """
    known = {scenario.name for scenario in SCENARIOS}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"unknown scenario(s): {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    return tuple(s for s in SCENARIOS if not names or s.name in names)


def _machine() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}")


def run(scenarios: Sequence[Scenario], profile: Profile) -> list[Result]:
    """Run ``scenarios`` one after the other, reporting progress on stderr."""
    results: list[Result] = []
    for scenario in scenarios:
        started = time.perf_counter()
        print(f"running {scenario.name} ...", file=sys.stderr, flush=True)
        results.extend(scenario.run(profile))
        print(f"  {scenario.name}: {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)
    return results


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m benchmarks") -> int:
    """Run the benchmarks; returns 0, 1 when a scenario failed, or 2 for a bad argument."""
    options = _parser(prog).parse_args(argv)
    try:
        scenarios = _select(options.only)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if options.list:
        for scenario in scenarios:
            print(f"{scenario.name:<20} {scenario.unit:<8} vs {scenario.baseline}")
        return 0
    profile = PROFILES["smoke" if options.smoke else "quick" if options.quick else "full"]
    started = time.perf_counter()
    results = run(scenarios, profile)
    title = (f"actorbus benchmarks ({profile.name}, {time.perf_counter() - started:.0f} s; "
             f"{_machine()})")
    print_table(results, sys.stdout, title=title)
    if options.json is not None:
        write_json(results, options.json)
    return 1 if any(result.error is not None for result in results) else 0
