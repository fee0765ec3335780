"""A remote receive that times out says how long the caller waited (issue 15 item 8)."""

from __future__ import annotations

import time

import pytest

import runtime
from runtime import Bus


@pytest.mark.parametrize("timeout", [0.3, 2.5])
def test_remote_receive_timeout_names_the_real_wait(timeout: float) -> None:
    with Bus() as bus:
        bus.create_topic("t")
        server = bus.serve(("127.0.0.1", 0), authkey=b"key")
        with runtime.connect(server.address, authkey=b"key") as remote:
            subscription = remote.topic("t").subscription(group="g")
            started = time.monotonic()

            with pytest.raises(TimeoutError) as info:
                subscription.receive(timeout=timeout)

            waited = time.monotonic() - started
            subscription.unsubscribe()
    assert str(info.value) == f"no message on topic 't' within {timeout}s"
    assert timeout <= waited < timeout + 5
