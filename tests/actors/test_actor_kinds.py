"""What thread and process actors do alike, run once per kind (the ``kind`` fixture).

Ordering, ask timeouts, failing asks, restarts that keep the mail, stopping. What only
one kind does lives in ``test_actor.py`` and ``process/test_process_actor.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from support.supervision import event_list

from actors import Actor, ActorSystem
from actors.errors import ActorDeadError, ActorNotFoundError, AskTimeoutError


class Recorder(Actor):
    """Records what it handles; ``("fail", x)`` raises, ``("wait", path)`` waits for a file."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, tuple) and message[0] == "fail":
            raise ValueError(f"failing on {message[1]}")
        if isinstance(message, tuple) and message[0] == "wait":
            _wait_for_file(message[1], timeout=10.0)
            return "waited"
        if message == "log":
            return list(self.log)
        self.log.append(message)
        return message


def _wait_for_file(path: str, timeout: float) -> None:
    """Holds the handler (in either kind of actor) until the test creates ``path``."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.005)  # sleep-ok: a handler simulating work until the test releases it


@pytest.fixture
def system() -> Any:
    with ActorSystem("kinds") as system:
        yield system




def test_tell_and_ask_are_handled_in_order(system: ActorSystem, kind: str) -> None:
    ref = system.spawn(Recorder, name="recorder", process=kind == "process")

    for i in range(1000):
        ref.tell(i)
    last = ref.ask("last").result(10)

    assert last == "last"
    assert ref.ask("log").result(10) == [*range(1000), "last"]


def test_ask_past_its_timeout_fails_with_ask_timeout_error(system: ActorSystem, kind: str,
                                                          tmp_path: Path) -> None:
    ref = system.spawn(Recorder, process=kind == "process")
    ref.ask("warm").result(10)
    started = time.monotonic()

    future = ref.ask(("wait", str(tmp_path / "go")), timeout=0.3)
    with pytest.raises(AskTimeoutError) as caught:
        future.result(5)
    elapsed = time.monotonic() - started
    (tmp_path / "go").touch()

    assert isinstance(caught.value, TimeoutError)
    assert 0.3 <= elapsed < 1.0


def test_failed_ask_reaches_the_caller_and_the_actor_resumes(system: ActorSystem,
                                                            kind: str) -> None:
    ref = system.spawn(Recorder, name="r", process=kind == "process")
    ref.tell("kept")

    failure = ref.ask(("fail", "k")).exception(10)

    assert isinstance(failure, ValueError)
    assert failure.args == ("failing on k",)
    assert ref.is_alive()
    assert ref.ask("log").result(10) == ["kept"]  # state kept: no restart
    assert system.status()["r"].restarts == 0


def test_failed_tell_restarts_and_queued_mail_survives(system: ActorSystem, kind: str,
                                                      tmp_path: Path) -> None:
    events, cond = event_list(system)
    ref = system.spawn(Recorder, name="r", process=kind == "process")
    ref.ask("warm").result(10)

    ref.tell(("wait", str(tmp_path / "go")))  # holds the actor: the rest queues behind the failure
    ref.tell(("fail", 1))
    for i in range(5):
        ref.tell(i)
    (tmp_path / "go").touch()
    log = ref.ask("log").result(10)
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 10)

    assert log == [0, 1, 2, 3, 4]  # a fresh instance, and none of the mail behind the failure lost
    assert [e.kind for e in events if e.name == "r"] == ["started", "failed", "restarted"]
    assert system.status()["r"].restarts == 1
    crashed = [(d.message, d.reason) for d in system.dead_letters if d.recipient == "r"]
    assert crashed == [(("fail", 1), "crashed")]


def test_stop_handles_queued_mail_then_dead_letters_the_rest(system: ActorSystem,
                                                            kind: str) -> None:
    ref = system.spawn(Recorder, name="stoppable", process=kind == "process")
    pending = [ref.ask(i) for i in range(3)]

    ref.stop()
    ref.tell("late")
    late_ask = ref.ask("late-ask")

    assert [f.result(5) for f in pending] == [0, 1, 2]
    assert not ref.is_alive()
    assert isinstance(late_ask.exception(5), ActorDeadError)
    letters = [(d.message, d.reason) for d in system.dead_letters if d.recipient == "stoppable"]
    assert letters == [("late", "stopped")]  # a late ask fails; only tells are dead-lettered
    with pytest.raises(ActorNotFoundError):
        system.lookup("stoppable")
