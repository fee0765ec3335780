"""Raw broker frames, for tests that play a hostile or careless peer."""

from __future__ import annotations

from typing import Any

from runtime.broker._protocol import wire_types
from runtime.broker._wire import CALL_ID, decode, unframed


def frame(pickled: bytes, call_id: int = 1) -> bytes:
    """A request frame: ``call_id``, then ``pickled`` as it is (valid or not)."""
    return CALL_ID.pack(call_id) + pickled


def reply(connection: Any, call_id: int = 1) -> Any:
    """Read one reply frame, check it answers ``call_id``, and decode it."""
    answered, body = unframed(connection.recv_bytes())
    assert answered == call_id, f"a reply to call {answered}, not {call_id}"
    return decode(body, wire_types())
