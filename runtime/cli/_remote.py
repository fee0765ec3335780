"""``actorbus stats`` and ``actorbus dlq``: inspect a served bus through ``runtime.connect``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from multiprocessing import AuthenticationError
from typing import Any

from rich.console import Console
from rich.table import Table

from runtime.broker._remote import connect as connect_remote
from runtime.broker._wire import NotTransferableError
from runtime.cli._endpoint import CliError, add_endpoint_arguments, address, authkey

__all__ = ["add_remote_commands", "connect"]

# The table's columns (--json has every counter).
_STATS_COLUMNS = {"published": "published", "delivered": "delivered", "nacked": "nacked",
                  "timed_out": "timed out", "dead_lettered": "dead", "pending": "pending"}


def add_remote_commands(commands: Any) -> None:
    """Register ``stats`` and ``dlq`` on the ``commands`` subparsers."""
    stats = commands.add_parser(
        "stats", help="show the topic stats of a served broker",
        description="Print every topic's counters from a broker started with 'actorbus serve', "
        "and, for a topic whose publishers would wait, what holds them (max_pending, a full "
        "group, a broadcast subscriber a ring behind).")
    add_endpoint_arguments(stats, serving=False)
    _add_redis_argument(stats)
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(run=run_stats)
    dlq = commands.add_parser(
        "dlq", help="list, drain or replay a topic's dead letters on a served broker",
        description="Show TOPIC's dead letters (oldest first). --drain removes them; "
        "--replay sends each back to the destination that failed it (its group or broadcast "
        "subscriber), as a new attempt of the same message id.")
    dlq.add_argument("topic", metavar="TOPIC", help="the topic whose dead letters to inspect")
    add_endpoint_arguments(dlq, serving=False)
    _add_redis_argument(dlq)
    action = dlq.add_mutually_exclusive_group()
    action.add_argument("--drain", action="store_true", help="remove them and print what was removed")
    action.add_argument(
        "--replay", action="store_true",
        help="replay them (oldest first) to the destinations that failed them, and remove them")
    dlq.set_defaults(run=run_dlq)


def _add_redis_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=None,
                        help="read the backend='redis' topics of this Redis (redis://host:port/db, or "
                        "redis+cluster://host:port for a cluster) "
                        "instead of a served broker")


def connect(args: argparse.Namespace) -> Any:
    """A `RemoteBus` for ``--address``/``--authkey-env``, or the topics of the Redis at
    ``--redis`` (the caller closes it).

    Raises:
        CliError: the broker refused the key.
        ConnectionError: the broker or the Redis is unreachable.
    """
    if getattr(args, "redis", None):
        from runtime.cli._redis import RedisTopics

        return RedisTopics(args.redis)

    key, where = authkey(args.authkey_env), address(args.address)
    try:
        return connect_remote(where, authkey=key)
    except AuthenticationError:
        raise CliError(f"the broker at {args.address} refused the key in ${args.authkey_env} "
                       "(a value 'hex:<digits>' means those bytes, any other its UTF-8 text)") from None


def run_stats(args: argparse.Namespace) -> int:
    """Print the stats of every served topic."""
    with connect(args) as remote:
        stats = remote.stats()
        held = remote.held_by() if hasattr(remote, "held_by") else {}
    if args.json:
        print(json.dumps({name: {**dataclasses.asdict(s), "held_by": held.get(name)}
                          for name, s in stats.items()}, indent=2))
        return 0
    where = args.redis or args.address
    table = Table(title=f"topics on {where}", title_justify="left")
    table.add_column("topic", no_wrap=True)
    for header in _STATS_COLUMNS.values():
        table.add_column(header, justify="right")
    for name, snapshot in stats.items():
        table.add_row(name, *(f"{getattr(snapshot, field):,}" for field in _STATS_COLUMNS))
    Console().print(table)
    for text in held.values():  # why messages pend: publishers wait on this
        print(f"held: {text}")
    return 0


def run_dlq(args: argparse.Namespace) -> int:
    """List, drain or replay ``args.topic``'s dead letters."""
    with connect(args) as remote:
        remote.topic(args.topic)  # TopicNotFoundError before anything else
        queue = _dead_letters(remote, args.topic)
        if args.replay:
            print(f"replayed {queue.replay()} dead letter(s) of {args.topic} to the destinations "
                  "that failed them")
            return 0
        try:
            letters = queue.drain() if args.drain else list(queue)
        except NotTransferableError as exc:  # the broker removed nothing
            raise CliError(
                f"the dead letters of {args.topic} hold a value that cannot cross the broker "
                f"({exc}); {'nothing was drained, ' if args.drain else ''}every letter is still "
                "there (serve the bus with allow= for its class, or --replay them)") from None
    Console().print(_letters_table(args.topic, letters))
    print(f"{'drained' if args.drain else 'listed'} {len(letters)} dead letter(s) of {args.topic}")
    return 0


def _dead_letters(remote: Any, topic: str) -> Any:
    if not hasattr(remote, "dead_letters"):
        raise CliError("this broker client has no dead-letter operations (RemoteBus.dead_letters)")
    return remote.dead_letters(topic)


def _letters_table(topic: str, letters: list[Any]) -> Table:
    table = Table(title=f"dead letters of {topic}", title_justify="left")
    for column in ("message id", "reason", "error", "group", "attempts", "at", "message"):
        table.add_column(column)
    for letter in letters:
        at = time.strftime("%H:%M:%S", time.localtime(letter.at))
        error = letter.error or ""
        if getattr(letter, "exception", None):  # a handler raised: name the type too
            error = f"{letter.exception}: {error}"
        table.add_row(letter.message_id, letter.reason, error, letter.group or "",
                      str(letter.attempts), at, _preview(letter.message))
    return table


def _preview(message: Any) -> str:
    data = getattr(message, "data", message)
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else repr(data)
    return text if len(text) <= 60 else text[:57] + "..."
