"""Thread actors: futures, fresh instances, names, events, dead letters (shared: test_actor_kinds)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from actors import Actor, ActorSystem, Event
from actors.errors import ActorNotFoundError, NameTakenError


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


def test_ask_returns_a_concurrent_future(system: ActorSystem) -> None:
    ref = system.spawn(Counter)

    future = ref.ask("x")

    assert isinstance(future, Future)
    assert future.result(5) == 1


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


def test_actor_system_shows_only_its_contract() -> None:
    public = {name for name in dir(ActorSystem) if not name.startswith("_")}

    assert public == {"lookup", "pool", "shutdown", "spawn", "status", "supervise"}
    with ActorSystem("faces") as system:
        fields = {name for name in vars(system) if not name.startswith("_")}
        assert fields == {"name", "start_method", "dead_letters", "events"}
