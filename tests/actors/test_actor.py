"""Thread actors: tell/ask, the failure path, stopping, dead letters, events."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from actors import Actor, ActorSystem, Event
from actors.errors import ActorDeadError, ActorNotFoundError, AskTimeoutError, NameTakenError


class Recorder(Actor):
    """Records what it handles; ``("fail", x)`` raises, ``("block", event)`` waits."""

    def __init__(self, log: list[Any]) -> None:
        super().__init__()
        self.log = log

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, tuple) and message[0] == "fail":
            raise ValueError(f"failing on {message[1]}")
        if isinstance(message, tuple) and message[0] == "block":
            message[1].wait(10)
            return "unblocked"
        self.log.append(message)
        return message


class Counter(Actor):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: Any) -> Any:
        self.count += 1
        return self.count


@pytest.fixture
def system() -> Any:
    with ActorSystem("test") as system:
        yield system


def test_tell_and_ask_are_handled_in_order(system: ActorSystem) -> None:
    log: list[Any] = []
    ref = system.spawn(Recorder, log, name="recorder")

    for i in range(100):
        ref.tell(i)
    last = ref.ask("last").result(5)

    assert last == "last"
    assert log == [*range(100), "last"]


def test_ask_returns_a_concurrent_future(system: ActorSystem) -> None:
    ref = system.spawn(Counter)

    future = ref.ask("x")

    assert isinstance(future, Future)
    assert future.result(5) == 1


def test_ask_past_its_timeout_fails_with_ask_timeout_error(system: ActorSystem) -> None:
    gate = threading.Event()
    ref = system.spawn(Recorder, [])
    started = time.monotonic()

    future = ref.ask(("block", gate), timeout=0.3)
    with pytest.raises(AskTimeoutError) as caught:
        future.result(5)
    elapsed = time.monotonic() - started
    gate.set()

    assert isinstance(caught.value, TimeoutError)
    assert 0.3 <= elapsed < 0.8


def test_failed_ask_reaches_the_caller_and_the_actor_resumes(system: ActorSystem) -> None:
    ref = system.spawn(Counter)
    ref.ask("a").result(5)

    class Boom(Actor):
        def on_receive(self, message: Any) -> Any:
            raise KeyError(message)

    boom = system.spawn(Boom)
    failure = boom.ask("k").exception(5)

    assert isinstance(failure, KeyError)
    assert boom.is_alive()
    assert ref.ask("b").result(5) == 2  # state kept: no restart


def test_failed_tell_restarts_and_queued_mail_survives(system: ActorSystem) -> None:
    log: list[Any] = []
    events: list[Event] = []
    system.events.subscribe(events.append)
    gate = threading.Event()
    ref = system.spawn(Recorder, log, name="r")

    ref.tell(("block", gate))  # hold the actor so the rest queues up behind the failure
    ref.tell(("fail", 1))
    for i in range(5):
        ref.tell(i)
    gate.set()
    assert ref.ask("done").result(5) == "done"

    assert log == [0, 1, 2, 3, 4, "done"]
    kinds = [(e.kind, e.name) for e in events if e.name == "r"]
    assert kinds == [("started", "r"), ("failed", "r"), ("restarted", "r")]
    assert system.status()["r"].restarts == 1
    crashed = [d for d in system.dead_letters if d.recipient == "r"]
    assert [(d.message, d.reason) for d in crashed] == [(("fail", 1), "crashed")]


def test_restart_builds_a_fresh_instance(system: ActorSystem) -> None:
    class Fragile(Counter):
        def on_receive(self, message: Any) -> Any:
            if message == "fail":
                raise RuntimeError("boom")
            return super().on_receive(message)

    ref = system.spawn(Fragile)
    assert ref.ask("x").result(5) == 1
    assert ref.ask("x").result(5) == 2

    ref.tell("fail")

    assert ref.ask("x").result(5) == 1


def test_stop_handles_queued_mail_then_dead_letters_the_rest(system: ActorSystem) -> None:
    log: list[Any] = []
    ref = system.spawn(Recorder, log, name="stoppable")
    for i in range(3):
        ref.tell(i)

    ref.stop()
    ref.tell("late")
    late_ask = ref.ask("late-ask")

    assert log == [0, 1, 2]
    assert not ref.is_alive()
    assert isinstance(late_ask.exception(5), ActorDeadError)
    letters = [(d.message, d.reason) for d in system.dead_letters if d.recipient == "stoppable"]
    assert letters == [("late", "stopped")]
    with pytest.raises(ActorNotFoundError):
        system.lookup("stoppable")


def test_names_are_unique_and_looked_up(system: ActorSystem) -> None:
    ref = system.spawn(Counter, name="only")

    with pytest.raises(NameTakenError):
        system.spawn(Counter, name="only")

    assert system.lookup("only") == ref
    with pytest.raises(ActorNotFoundError) as caught:
        system.lookup("nobody")
    assert isinstance(caught.value, LookupError)


def test_lifecycle_events_in_order(system: ActorSystem) -> None:
    events: list[Event] = []
    unsubscribe = system.events.subscribe(events.append)

    ref = system.spawn(Counter, name="c")
    ref.stop()
    unsubscribe()
    system.spawn(Counter, name="unseen")

    assert [(e.kind, e.name, e.error) for e in events] == [("started", "c", None), ("stopped", "c", None)]


def test_fork_start_method_is_refused() -> None:
    with pytest.raises(ValueError, match="fork"):
        ActorSystem(start_method="fork")


def test_dead_letters_drain_and_subscribe(system: ActorSystem) -> None:
    seen: list[Any] = []
    system.dead_letters.subscribe(lambda letter: seen.append(letter.message))
    ref = system.spawn(Counter, name="gone")
    ref.stop()

    ref.tell("a")
    ref.tell("b")
    drained = system.dead_letters.drain()

    assert [d.message for d in drained] == ["a", "b"]
    assert all(d.recipient == "gone" and d.reason == "stopped" for d in drained)
    assert seen == ["a", "b"]
    assert len(system.dead_letters) == 0


def test_shutdown_stops_every_actor_and_is_idempotent() -> None:
    system = ActorSystem("short")
    refs = [system.spawn(Counter) for _ in range(5)]

    system.shutdown(timeout=5)
    system.shutdown(timeout=5)

    assert not any(ref.is_alive() for ref in refs)
