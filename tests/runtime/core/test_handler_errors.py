"""A raising handler is visible: a WARNING with its traceback, and a dead letter that keeps
the exception's type and traceback (thread members, worker processes, broadcast)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from runtime import Bus, Delivery


def _typo(delivery: Delivery[Any]) -> None:
    delivery.message.data  # noqa: B018  # the issue's typo: a plain bytes message has no .data


def _warnings_with_tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    texts = []
    for record in caplog.records:
        if record.levelno == logging.WARNING and record.name.startswith("runtime"):
            traceback = caplog.handler.format(record)
            if "AttributeError" in traceback and "_typo" in traceback:
                texts.append(traceback)
    return texts


@pytest.mark.parametrize("subscribe", [
    pytest.param({"group": "g"}, id="thread-member"),
    pytest.param({"group": "g", "workers": 1}, id="worker-process"),
    pytest.param({}, id="broadcast"),
])
def test_a_raising_handler_is_logged_and_its_dead_letter_keeps_type_and_traceback(
    caplog: pytest.LogCaptureFixture, subscribe: dict[str, Any],
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime")
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(_typo, **subscribe)

        outcomes = [topic.publish(b"%d" % n).outcome for n in range(3)]

        assert [o.result(timeout=30).nacks[0].reason for o in outcomes] == ["error"] * 3
        letters = topic.dead_letters.drain()
    assert [(d.reason, d.exception) for d in letters] == [("error", "AttributeError")] * 3
    assert all("'bytes' object has no attribute 'data'" in (d.error or "") for d in letters)
    for letter in letters:
        assert letter.traceback is not None
        assert letter.traceback.startswith("Traceback (most recent call last)")
        assert "_typo" in letter.traceback and "delivery.message.data" in letter.traceback
    assert len(_warnings_with_tracebacks(caplog)) == 3


def test_a_nack_has_no_exception_or_traceback() -> None:
    with Bus() as bus:
        topic = bus.create_topic("t")
        topic.subscribe(lambda d: d.nack("no"), group="g")

        topic.publish(1).outcome.result(timeout=5)

        (letter,) = topic.dead_letters.drain()
    assert (letter.reason, letter.error, letter.exception, letter.traceback) == (
        "nack", "no", None, None,
    )
