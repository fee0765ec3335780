"""Where the CLI finds a broker: the ``host:port`` address and the key from the environment."""

from __future__ import annotations

import argparse
import os

__all__ = [
    "DEFAULT_ADDRESS", "DEFAULT_AUTHKEY_ENV", "CliError", "add_endpoint_arguments", "address", "authkey",
]

DEFAULT_ADDRESS = "127.0.0.1:7250"
DEFAULT_AUTHKEY_ENV = "ACTORBUS_AUTHKEY"


class CliError(Exception):
    """A user mistake the CLI reports as one line (exit code 2)."""


def add_endpoint_arguments(parser: argparse.ArgumentParser, *, serving: bool) -> None:
    """Add ``--address`` and ``--authkey-env`` to ``parser``."""
    verb = "bind" if serving else "connect to"
    parser.add_argument("--address", default=DEFAULT_ADDRESS, metavar="HOST:PORT",
                        help=f"broker address to {verb} (default {DEFAULT_ADDRESS}; port 0 picks a free one)"
                        if serving else f"broker address to {verb} (default {DEFAULT_ADDRESS})")
    parser.add_argument("--authkey-env", default=DEFAULT_AUTHKEY_ENV, metavar="NAME",
                        help=f"environment variable holding the shared key (default {DEFAULT_AUTHKEY_ENV}; "
                        "a value 'hex:...' is read as hex)")


def address(text: str) -> tuple[str, int]:
    """``(host, port)`` from ``host:port``.

    Raises:
        CliError: not a host and a port in 0..65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--address must be HOST:PORT (e.g. {DEFAULT_ADDRESS}), got {text!r}")
    return host.strip("[]"), int(port)


def authkey(variable: str) -> bytes:
    """The key held by environment variable ``variable`` (``hex:`` prefix: hex bytes).

    Raises:
        CliError: the variable is unset, empty or bad hex.
    """
    value = os.environ.get(variable, "")
    if not value:
        raise CliError(f"environment variable {variable} is not set: export {variable}=<a shared secret> "
                       "(or name another with --authkey-env)")
    if not value.startswith("hex:"):
        return value.encode()
    try:
        return bytes.fromhex(value[4:])
    except ValueError:
        raise CliError(f"environment variable {variable} starts with 'hex:' but is not hex") from None
