"""Supervision trees: strategies, restart kinds, restart limits and escalation, backoff."""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.supervision import EventLog, Worker

from actors import Actor, ActorSystem, Backoff, ChildSpec, SupervisorSpec
from actors.errors import RestartLimitError


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


def test_a_tree_past_its_limit_is_stopped_alone_by_the_root(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    bystander = system.spawn(Worker, births, "bystander", name="bystander")
    tree = system.supervise(_tree(births, "one_for_one", max_restarts=3, within=5.0), name="tree")
    a = system.lookup("a")

    for count in range(1, 4):
        a.tell("fail")
        log.wait_for("restarted", "a", count)
    a.tell("fail")  # the 4th crash within the window: "tree" gives up, the root drops it
    gave_up = log.wait_for("failed", "tree")[0]
    escalated = log.wait_for("escalated", "tree")[0]
    log.wait_for("stopped", "tree")

    assert isinstance(gave_up.error, RestartLimitError)
    assert isinstance(escalated.error, RestartLimitError)
    assert escalated.error.args == ("tree", 3, 5.0)
    assert log.of("restarted", "tree") == []  # not restarted by the root
    assert births["a"] == 4
    assert not tree.is_alive() and not a.is_alive()
    assert bystander.ask("x").result(5) == "ok"
    assert set(system.status()) == {"sup", "bystander"}


def test_root_keeps_serving_after_a_child_went_past_its_budget(system: ActorSystem) -> None:
    log = EventLog(system)

    class AlwaysFails(Actor):
        def on_receive(self, message: Any) -> Any:
            raise RuntimeError("no")

    ref = system.spawn(AlwaysFails, name="doomed")
    for _ in range(4):
        ref.tell("x")
    escalated = log.wait_for("escalated", "doomed")[0]

    assert isinstance(escalated.error, RestartLimitError)
    assert escalated.error.args == ("doomed", 3, 5.0)
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
