"""The ``actorbus`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actorbus", description="Actors on multiprocessing, and a pub/sub topic runtime.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="run the example pipeline end to end")
    demo.add_argument("--messages", type=int, default=2000, help="how many messages (default 2000)")
    demo.add_argument("--workers", type=int, default=None, help="worker processes (default: CPUs)")
    bench = commands.add_parser("bench", help="run the benchmarks (python -m benchmarks)")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="passed to python -m benchmarks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(messages=args.messages, workers=args.workers)
    if args.command == "bench":
        try:
            from benchmarks import main as bench_main
        except ImportError as exc:
            print(f"actorbus: benchmarks are not available: {exc}", file=sys.stderr)
            return 2
        return int(bench_main(args.args))
    return 2  # argparse rejects unknown commands before this


if __name__ == "__main__":
    sys.exit(main())
