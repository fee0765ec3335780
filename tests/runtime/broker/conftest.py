"""The served bus and a connected client, for the broker tests that need no other limits.

A test module defines its ``bus`` fixture (its topics) and its ``KEY`` (the authkey both
sides use); ``server`` serves that bus and ``remote`` connects to it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import Bus
from runtime.broker._remote import RemoteBus, connect
from runtime.broker._server import BusServer, serve


@pytest.fixture
def server(bus: Bus, request: pytest.FixtureRequest) -> Iterator[BusServer]:
    with serve(bus, authkey=request.module.KEY) as server:
        yield server


@pytest.fixture
def remote(server: BusServer, request: pytest.FixtureRequest) -> Iterator[RemoteBus]:
    with connect(server.address, authkey=request.module.KEY) as remote:
        yield remote
