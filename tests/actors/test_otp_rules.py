"""OTP's rules at the root and for temporary children."""

from __future__ import annotations

from typing import Any

import pytest
from support.supervision import EventLog, Worker

from actors import ActorSystem, ChildSpec, SupervisorSpec
from actors.errors import RestartLimitError


@pytest.fixture
def system() -> Any:
    with ActorSystem("otp") as system:
        yield system


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_a_temporary_sibling_is_stopped_and_removed_not_restarted(system: ActorSystem,
                                                                  strategy: str) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    spec = SupervisorSpec(strategy=strategy, children=[  # type: ignore[arg-type]
        ChildSpec(id="fails", factory=Worker, args=(births, "fails")),
        ChildSpec(id="temp", factory=Worker, args=(births, "temp"), restart="temporary"),
        ChildSpec(id="perm", factory=Worker, args=(births, "perm")),
    ])
    system.supervise(spec, name="tree")
    temp = system.lookup("temp")

    system.lookup("fails").tell("fail")
    log.wait_for("restarted", "perm")
    log.wait_for("stopped", "temp")

    assert births == {"fails": 2, "temp": 1, "perm": 2}
    assert log.of("restarted", "temp") == []
    assert not temp.is_alive()
    assert set(system.status()) == {"otp", "tree", "fails", "perm"}


def test_each_spawned_actor_has_its_own_restart_budget(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    storm = system.spawn(Worker, births, "storm", name="storm")
    calm = system.spawn(Worker, births, "calm", name="calm")

    for count in range(1, 4):  # within SupervisorSpec's default budget: 3 in 5 s
        storm.tell("fail")
        log.wait_for("restarted", "storm", count)
    calm.tell("fail")  # another actor's crash costs storm nothing
    log.wait_for("restarted", "calm")
    storm.tell("fail")
    escalated = log.wait_for("escalated", "storm")[0]

    assert isinstance(escalated.error, RestartLimitError)
    assert escalated.error.args == ("storm", 3, 5.0)
    assert not storm.is_alive()
    assert births == {"storm": 4, "calm": 2}
    assert calm.ask("x").result(5) == "ok"
    assert log.of("escalated", "calm") == [] and log.of("escalated", "otp") == []


def test_a_tree_is_restarted_by_the_root_within_its_own_budget_only(system: ActorSystem) -> None:
    births: dict[str, int] = {}
    log = EventLog(system)
    leaf = ChildSpec(id="leaf", factory=Worker, args=(births, "leaf"))
    tree = system.supervise(SupervisorSpec(children=[leaf], max_restarts=1, within=30.0),
                            name="tree")

    system.lookup("leaf").tell("fail")
    log.wait_for("restarted", "leaf")
    system.lookup("leaf").tell("fail")  # the second within 30 s: the tree gives up
    escalated = log.wait_for("escalated", "tree")[0]

    assert escalated.error.args == ("tree", 1, 30.0)
    assert births == {"leaf": 2}
    assert not tree.is_alive()
    assert set(system.status()) == {"otp"}
