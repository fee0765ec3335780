"""The ``actorbus`` command line: ``demo``, ``serve``, ``stats``, ``dlq``, ``bench``.

User mistakes (a bad flag, a missing key, an unreachable broker, a bad topics file)
print one line on stderr and exit non-zero; only bugs show a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from multiprocessing import AuthenticationError
from pathlib import Path
from typing import NoReturn

from runtime.cli._endpoint import CliError
from runtime.cli._remote import add_remote_commands
from runtime.cli._serve import add_serve_command
from runtime.cli._topics_file import TopicsFileError
from runtime.errors import BusError

__all__ = ["main"]

USAGE_ERROR = 2
FAILURE = 1
# Errors a user causes and can fix from the message alone.
_USER_ERRORS = (CliError, TopicsFileError, BusError, ConnectionError, AuthenticationError, OSError)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="actorbus", description="Actors on multiprocessing, and a pub/sub topic runtime.",
        epilog="Run 'actorbus COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)
    demo = commands.add_parser(
        "demo", help="run the example order pipeline end to end",
        description="Publish orders to topic 'orders', bill them on a process pool, audit them, "
        "dead-letter the invalid ones and (with Java + pyspark) aggregate revenue per customer "
        "on Spark. Exits 0 only when every order was acked or dead-lettered.")
    demo.add_argument("--messages", type=_positive, default=2000, metavar="N",
                      help="how many orders to publish (default 2000)")
    demo.add_argument("--workers", type=_positive, default=None, metavar="N",
                      help="billing worker processes (default: the CPU count)")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark stage")
    demo.add_argument("--redis", metavar="URL", default=None,
                      help="run on backend='redis' topics of this Redis (redis://host:port/db, or "
                      "redis+cluster://host:port for a cluster); "
                      "the Spark stage is skipped")
    demo.set_defaults(run=_run_demo)
    add_serve_command(commands)
    add_remote_commands(commands)
    bench = commands.add_parser(
        "bench", help="run the benchmarks (same as python -m benchmarks)", add_help=False,
        description="Everything after 'bench' goes to python -m benchmarks (try 'actorbus bench --help').")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for python -m benchmarks")
    bench.set_defaults(run=_run_bench)
    return parser


def _version() -> str:
    try:
        return metadata.version("actorbus")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _run_demo(args: argparse.Namespace) -> int:
    from runtime.cli.demo._run import run_demo

    return run_demo(messages=args.messages, workers=args.workers, spark=not args.no_spark,
                    redis=args.redis)


def _run_bench(args: argparse.Namespace) -> int:
    # The benchmarks live beside the packages in a source checkout and are not installed
    # (a top-level package named ``benchmarks`` would squat a generic name in site-packages).
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "benchmarks" / "__init__.py").is_file():
        raise CliError("the benchmarks ship with the source checkout, not the installed package: "
                       "run 'actorbus bench' from an editable install (pip install -e .)")
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    from benchmarks import main as bench_main

    return int(bench_main(args.args, prog="actorbus bench") or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["bench"]:  # a pass-through: argparse would claim its flags
            return _run_bench(argparse.Namespace(args=argv[1:]))
        args = _build_parser().parse_args(argv)
        return int(args.run(args))
    except SystemExit as exc:  # --help, or a command that exits on its own
        return exc.code if isinstance(exc.code, int) else FAILURE
    except KeyboardInterrupt:
        print("actorbus: interrupted", file=sys.stderr)
        return 130
    except CliError as exc:
        print(f"actorbus: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except _USER_ERRORS as exc:
        print(f"actorbus: error: {_describe(exc)}", file=sys.stderr)
        return FAILURE


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, LookupError) and isinstance(exc, BusError):
        return f"not found: {text}"
    return text


if __name__ == "__main__":
    sys.exit(main())
