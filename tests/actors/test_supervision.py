"""Supervision trees: strategies, restart kinds, restart limits and escalation, backoff."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from actors import Actor, ActorSystem, Backoff, ChildSpec, Event, SupervisorSpec
from actors.errors import RestartLimitError


class Worker(Actor):
    """Counts the instances built per id; ``"fail"`` raises, ``"exit"`` stops itself."""

    def __init__(self, births: dict[str, int], ident: str) -> None:
        super().__init__()
        births[ident] = births.get(ident, 0) + 1
        self.births = births

    def on_receive(self, message: Any) -> Any:
        if message == "fail":
            raise RuntimeError("worker failure")
        if message == "exit":
            self.stop()
            return None
        return "ok"


class EventLog:
    """Collects events; waits until a predicate over them holds."""

    def __init__(self, system: ActorSystem) -> None:
        self.events: list[Event] = []
        self._cond = threading.Condition()
        system.events.subscribe(self._add)

    def _add(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, kind: str, name: str, count: int = 1, timeout: float = 5.0) -> list[Event]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.of(kind, name)) >= count, timeout), (
                f"no {count} {kind} events for {name}: {self.events}")
            return self.of(kind, name)

    def of(self, kind: str, name: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (name is None or e.name == name)]


def _tree(births: dict[str, int], strategy: str, **kwargs: Any) -> SupervisorSpec:
    children = [ChildSpec(id=i, factory=Worker, args=(births, i)) for i in ("a", "b", "c")]
    return SupervisorSpec(children=children, strategy=strategy, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def system() -> Any:
    with ActorSystem("sup") as system:
        yield system


def test_supervise_returns_once_every_child_runs(system: ActorSystem) -> None:
    births: dict[str, int] = {}

    system.supervise(_tree(births, "one_for_one"), name="tree")

    assert births == {"a": 1, "b": 1, "c": 1}
    assert system.lookup("b").ask("hi").result(5) == "ok"


def test_one_for_one_restarts_only_the_failed_child(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    system.supervise(_tree(births, "one_for_one"), name="tree")

    system.lookup("b").tell("fail")
    log.wait_for("restarted", "b")

    assert births == {"a": 1, "b": 2, "c": 1}


def test_one_for_all_restarts_every_sibling(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    system.supervise(_tree(births, "one_for_all"), name="tree")

    system.lookup("b").tell("fail")
    for name in ("a", "b", "c"):
        log.wait_for("restarted", name)

    assert births == {"a": 2, "b": 2, "c": 2}
    assert all(system.lookup(n).ask("x").result(5) == "ok" for n in "abc")


def test_rest_for_one_restarts_the_failed_child_and_those_after_it(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    system.supervise(_tree(births, "rest_for_one"), name="tree")

    system.lookup("b").tell("fail")
    log.wait_for("restarted", "b")
    log.wait_for("restarted", "c")

    assert births == {"a": 1, "b": 2, "c": 2}
    assert log.of("restarted", "a") == []


@pytest.mark.parametrize(("kind", "restarted_after_exit", "restarted_after_failure"), [
    ("permanent", True, True),
    ("transient", False, True),
    ("temporary", False, False),
])
def test_restart_kinds(system: ActorSystem, kind: str, restarted_after_exit: bool,
                       restarted_after_failure: bool) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    spec = SupervisorSpec(children=[
        ChildSpec(id="exits", factory=Worker, args=(births, "exits"), restart=kind),  # type: ignore[arg-type]
        ChildSpec(id="fails", factory=Worker, args=(births, "fails"), restart=kind),  # type: ignore[arg-type]
    ])
    system.supervise(spec, name="kinds")

    system.lookup("exits").tell("exit")
    system.lookup("fails").tell("fail")
    log.wait_for("restarted" if restarted_after_exit else "stopped", "exits")
    log.wait_for("restarted" if restarted_after_failure else "stopped", "fails")

    assert births["exits"] == (2 if restarted_after_exit else 1)
    assert births["fails"] == (2 if restarted_after_failure else 1)


def test_stop_of_a_supervised_child_is_final(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    system.supervise(_tree(births, "one_for_one"), name="tree")
    b = system.lookup("b")

    b.stop()

    assert not b.is_alive()
    assert births["b"] == 1
    system.lookup("a").tell("fail")  # the supervisor carries on without b
    assert system.lookup("a").ask("x").result(5) == "ok"


def test_too_many_restarts_escalate_to_the_root(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    tree = system.supervise(_tree(births, "one_for_one", max_restarts=3, within=5.0), name="tree")
    a = system.lookup("a")

    for count in range(1, 4):
        a.tell("fail")
        log.wait_for("restarted", "a", count)
    a.tell("fail")  # the 4th crash within the window: "tree" gives up, the root restarts it
    gave_up = log.wait_for("failed", "tree")[0]
    log.wait_for("restarted", "tree")
    for count in range(2, 5):  # each further escalation costs the root one of its restarts
        for _ in range(4):
            a.tell("fail")
        log.wait_for("failed", "tree", count)
    escalated = log.wait_for("escalated", "sup")[0]

    assert isinstance(gave_up.error, RestartLimitError)
    assert "tree" in str(gave_up.error)
    assert isinstance(escalated.error, RestartLimitError)
    assert escalated.error.args[0] == "sup"
    assert not tree.is_alive() and not a.is_alive()
    assert set(system.status()) == {"sup"}


def test_root_keeps_serving_after_it_gave_up(system: ActorSystem) -> None:
    log = EventLog(system)

    class AlwaysFails(Actor):
        def on_receive(self, message: Any) -> Any:
            raise RuntimeError("no")

    ref = system.spawn(AlwaysFails, name="doomed")
    for _ in range(4):
        ref.tell("x")
    log.wait_for("escalated", "sup")

    assert not ref.is_alive()
    assert system.spawn(Worker, {}, "later", name="later").ask("x").result(5) == "ok"


def test_backoff_delays_consecutive_restarts() -> None:
    backoff = Backoff(min=0.1, max=0.3, jitter=0.0)

    delays = [backoff.delay(n) for n in range(1, 5)]

    assert delays == pytest.approx([0.1, 0.2, 0.3, 0.3])
    spread = [Backoff(min=1.0, max=1.0, jitter=0.2).delay(1) for _ in range(200)]
    assert 0.8 <= min(spread) < max(spread) <= 1.2


def test_restart_waits_for_its_backoff(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    spec = _tree(births, "one_for_one", backoff=Backoff(min=0.2, max=1.0, jitter=0.0))
    system.supervise(spec, name="slow")

    failed_at = time.monotonic()
    system.lookup("a").tell("fail")
    restarted = log.wait_for("restarted", "a")[0]

    assert restarted.at - time.time() < 1  # sanity: a wall-clock stamp
    assert time.monotonic() - failed_at >= 0.2


def test_nested_supervisor_restarts_its_subtree(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    inner = SupervisorSpec(children=[ChildSpec(id="leaf", factory=Worker, args=(births, "leaf"))],
                           max_restarts=0)
    outer = SupervisorSpec(children=[
        ChildSpec(id="inner", factory=inner),
        ChildSpec(id="sibling", factory=Worker, args=(births, "sibling")),
    ])
    system.supervise(outer, name="outer")
    leaf = system.lookup("leaf")

    leaf.tell("fail")  # inner allows no restart: it gives up and outer restarts it
    log.wait_for("restarted", "inner")
    log.wait_for("restarted", "leaf")

    assert births == {"leaf": 2, "sibling": 1}
    assert leaf.ask("x").result(5) == "ok"  # the same Ref reaches the new leaf
