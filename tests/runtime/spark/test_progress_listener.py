"""The progress listener's ack of a committed batch, against a real broker socket."""

from __future__ import annotations

import json
import logging

import pytest

from runtime import Bus

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from runtime.spark._listener import AckOnProgress  # noqa: E402

KEY_ENV = "ACTORBUS_TEST_LISTENER_KEY"


def _offset(address: str, offset: int = 3) -> str:
    return json.dumps({"offset": offset, "lease": [address, KEY_ENV, "t", "g", "c", 30.0]})


def test_a_broker_closed_after_its_query_costs_an_info_line_not_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(KEY_ENV, "secret")
    with Bus() as bus:
        server = bus.serve(("127.0.0.1", 0), authkey=b"secret")
        host, port = server.address
        server.close()  # as a script does right after awaitTermination

        with caplog.at_level(logging.INFO, logger="runtime.spark"):
            AckOnProgress().ack(_offset(f"{host}:{port}"))

    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("runtime")]
    assert len(records) == 1
    assert records[0][0] == logging.INFO
    assert "not acked, the broker is unreachable" in records[0][1]


def test_another_failure_is_still_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)  # the authkey is missing: not a closed broker

    with caplog.at_level(logging.INFO, logger="runtime.spark"):
        AckOnProgress().ack(_offset("127.0.0.1:9"))

    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("runtime")]
    assert [level for level, _ in records] == [logging.WARNING]
    assert "could not ack a committed batch" in records[0][1] and KEY_ENV in records[0][1]


def test_another_sources_offset_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="runtime.spark"):
        AckOnProgress().ack(json.dumps({"logOffset": 7}))
        AckOnProgress().ack(None)

    assert not [r for r in caplog.records if r.name.startswith("runtime")]
