"""``actorbus serve``: a standalone broker holding the topics of a topics file."""

from __future__ import annotations

import argparse
import contextlib
import errno
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from runtime.cli._endpoint import CliError, add_endpoint_arguments, address, authkey
from runtime.cli._metrics import MetricsServer
from runtime.cli._topics_file import load_topics

__all__ = ["add_serve_command", "run_serve"]

_EXAMPLE = """\
topics file (TOML):
  [defaults]
  ack_timeout = 30.0
  [topics.orders]
  max_pending = 10000
  balanced_capacity = 10000
  groups = ["billing", "analytics"]
  [topics.revenue]

example:
  export ACTORBUS_AUTHKEY=hex:$(python -c 'import secrets; print(secrets.token_hex(16))')
  (a value 'hex:<digits>' is those bytes; any other value is its UTF-8 bytes)
  actorbus serve topics.toml --address 127.0.0.1:7250 --metrics-port 9464
"""


def add_serve_command(commands: Any) -> None:
    """Register ``serve`` on the ``commands`` subparsers."""
    serve = commands.add_parser(
        "serve", help="run a standalone broker from a topics file",
        description="Serve the topics of TOPICS_FILE to other processes until SIGTERM or Ctrl-C. "
        "The topics' actors run under a supervisor; if it gives up, serve exits with code 1.",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("topics_file", metavar="TOPICS_FILE", help="TOML file naming the topics and groups")
    add_endpoint_arguments(serve, serving=True)
    serve.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="also serve Prometheus metrics on http://HOST:PORT/metrics (0: a free port)")
    serve.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT (exit 0) or until the root supervisor escalates (exit 1)."""
    key = authkey(args.authkey_env)
    host, port = address(args.address)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise CliError(f"--metrics-port must be 0..65535, got {args.metrics_port}")
    topics = load_topics(args.topics_file)
    stop = threading.Event()
    escalated: list[Any] = []
    with _stop_on_signals(stop), contextlib.ExitStack() as resources:
        bus = topics.build()
        resources.callback(bus.close)
        resources.callback(bus.system.events.subscribe(lambda event: _watch(event, stop, escalated)))
        server = _serve(bus, host, port, key)
        resources.callback(server.close)
        line = f"actorbus: serving {len(topics.topics)} topic(s) on {_where(server.address)}"
        if args.metrics_port is not None:
            metrics = _bound(lambda: MetricsServer(bus, host=host, port=args.metrics_port),
                             "metrics", host, args.metrics_port)
            resources.callback(metrics.close)
            line += f", metrics on http://{_where(metrics.address)}/metrics"
        print(line, flush=True)
        while not stop.wait(1.0):
            pass
    if escalated:
        print(f"actorbus: supervisor gave up: {escalated[0].error}", flush=True)
        return 1
    print("actorbus: broker stopped", flush=True)
    return 0


def _serve(bus: Any, host: str, port: int, key: bytes) -> Any:
    try:
        return _bound(lambda: bus.serve((host, port), authkey=key), "broker", host, port)
    except NotImplementedError as exc:
        raise CliError(f"the broker endpoint is not available in this build ({exc})") from None


def _bound(start: Callable[[], Any], what: str, host: str, port: int) -> Any:
    """``start()``, with a bind failure turned into one line naming the address."""
    try:
        return start()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            detail = "the port is already in use (is another broker running?)"
        else:
            detail = exc.strerror or str(exc)
        raise CliError(f"cannot serve the {what} on {host}:{port}: {detail}") from None


def _watch(event: Any, stop: threading.Event, escalated: list[Any]) -> None:
    if event.kind == "escalated":
        escalated.append(event)
        stop.set()


def _where(bound: tuple[str, int]) -> str:
    return f"{bound[0]}:{bound[1]}"


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM and SIGINT (main thread only); restore the handlers after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
