"""pykka's habits work: proxies, ``self.actor_ref``, failure logging, ``start()``, BaseException."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pykka
import pytest
from support.supervision import event_list

from actors import Actor, ActorSystem, Event


class Account(Actor):
    """A pykka-style actor: methods and attributes, reached through a proxy."""

    def __init__(self) -> None:
        super().__init__()
        self.balance = 0
        self.log: list[Any] = []

    def deposit(self, amount: int, *, note: str = "") -> int:
        self.balance += amount
        self.log.append(note or amount)
        return self.balance

    def fail(self) -> None:
        raise ValueError("declined")

    def on_receive(self, message: Any) -> Any:
        if message == "self-tell":
            self.actor_ref.tell("told-by-self")
            return None
        if message == "self-proxy":
            self.actor_ref.proxy().deposit.defer(5, note="by-self-proxy")
            return None
        if message == "self-ask":
            self.actor_ref.ask("asked-by-self", block=False)
            return None
        if message == "crash":
            raise RuntimeError("crash on a tell")
        if message == "exit":
            raise SystemExit(3)
        if message == "interrupt":
            raise KeyboardInterrupt
        if message == "log":
            return list(self.log)
        self.log.append(message)
        return message


class StopsInStart(Actor):
    def on_start(self) -> None:
        self.stop()

    def on_receive(self, message: Any) -> Any:
        return message


@pytest.fixture
def system() -> Any:
    with ActorSystem("pykka") as system:
        yield system




def test_proxy_calls_methods_and_reads_and_writes_attributes(system: ActorSystem, kind: str) -> None:
    proxy = system.spawn(Account, name="acct", process=kind == "process").proxy()

    first = proxy.deposit(10)
    second = proxy.deposit(5, note="gift")
    proxy.balance = 100
    balance = proxy.balance

    assert isinstance(proxy, pykka.ActorProxy)
    assert isinstance(first, pykka.Future)
    assert (first.get(timeout=10), second.get(timeout=10)) == (10, 15)
    assert balance.get(timeout=10) == 100
    assert proxy.log.get(timeout=10) == [10, "gift"]


def test_proxy_defer_has_tell_semantics_and_a_failing_call_fails_its_future(
        system: ActorSystem, kind: str) -> None:
    ref = system.spawn(Account, name="acct", process=kind == "process")
    proxy = ref.proxy()

    proxy.deposit.defer(7)
    failed = proxy.fail()

    with pytest.raises(ValueError, match="declined"):
        failed.get(timeout=10)
    assert proxy.balance.get(timeout=10) == 7
    assert ref.ask("log").result(10) == [7]  # the failed call was an ask: no restart


def test_self_actor_ref_reaches_the_live_mailbox_also_after_a_restart(
        system: ActorSystem, kind: str) -> None:
    events, cond = event_list(system)
    ref = system.spawn(Account, name="acct", process=kind == "process")

    ref.tell("self-tell")
    ref.tell("self-proxy")
    ref.tell("self-ask")
    ref.ask("sync").result(10)  # the three handled: what they sent themselves is queued
    before = ref.ask("log").result(10)
    ref.tell("crash")  # a fresh instance: its actor_ref must reach the same mailbox
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 10)
    ref.tell("self-tell")
    ref.ask("sync").result(10)
    after = ref.ask("log").result(10)

    # where "sync" lands among them depends on when the self-sent mail was queued
    assert sorted(before) == ["asked-by-self", "by-self-proxy", "sync", "told-by-self"]
    assert sorted(after) == ["sync", "told-by-self"]


def test_failures_are_logged_as_pykka_logs_them(system: ActorSystem,
                                                caplog: pytest.LogCaptureFixture) -> None:
    ref = system.spawn(Account, name="acct")
    caplog.set_level(logging.INFO, logger="actors")

    failed_ask = ref.proxy().fail()
    with pytest.raises(ValueError):
        failed_ask.get(timeout=5)
    ref.tell("crash")
    ref.ask("log").result(5)

    records = [(r.levelno, r.name.split(".")[0], r.exc_info[0] if r.exc_info else None)
               for r in caplog.records if r.name.startswith("actors")]
    assert records == [(logging.INFO, "actors", ValueError), (logging.ERROR, "actors", RuntimeError)]
    assert "acct" in caplog.records[-1].getMessage()


def test_failures_of_a_process_actor_are_logged_in_the_parent(
        system: ActorSystem, caplog: pytest.LogCaptureFixture) -> None:
    ref = system.spawn(Account, name="acct", process=True)
    caplog.set_level(logging.INFO, logger="actors")

    with pytest.raises(ValueError):
        ref.proxy().fail().get(timeout=10)
    ref.tell("crash")
    ref.ask("log").result(10)

    records = [(r.levelno, r.exc_info[0] if r.exc_info else None)
               for r in caplog.records if r.name.startswith("actors")]
    assert records == [(logging.INFO, ValueError), (logging.ERROR, RuntimeError)]
    assert "crash on a tell" in caplog.text and "on_receive" in caplog.text  # remote traceback


@pytest.mark.parametrize(("message", "error"),
                         [("exit", SystemExit), ("interrupt", KeyboardInterrupt)])
def test_a_base_exception_fails_the_actor_and_the_supervisor_restarts_it(
        system: ActorSystem, kind: str, message: str, error: type[BaseException]) -> None:
    events, cond = event_list(system)
    ref = system.spawn(Account, name="acct", process=kind == "process")
    ref.tell("before")

    failure = ref.ask(message).exception(10)
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 10)

    assert isinstance(failure, error)
    assert ref.is_alive()
    assert system.status()["acct"].restarts == 1
    assert ref.ask("after").result(10) == "after"
    assert [e.kind for e in events if e.name == "acct"] == ["started", "failed", "restarted"]


def test_status_counts_each_restart_before_its_restarted_event(system: ActorSystem, kind: str) -> None:
    """A listener of "restarted" that reads status() sees the restart counted (process
    actors restart in place; their count once lagged on the supervisor's thread)."""
    seen: list[int] = []
    done = threading.Event()

    def on_event(event: Event) -> None:
        if event.name == "acct" and event.kind == "restarted":
            seen.append(system.status()["acct"].restarts)
            if len(seen) == 3:
                done.set()

    system.events.subscribe(on_event)
    ref = system.spawn(Account, name="acct", process=kind == "process")
    for _ in range(3):
        ref.tell("crash")
        assert ref.ask("sync").result(10) == "sync"  # answered by the next incarnation

    assert done.wait(10)
    assert seen == [1, 2, 3]


def test_pykka_start_raises_a_type_error_pointing_to_spawn() -> None:
    with pytest.raises(TypeError, match=r"system\.spawn\(Account"):
        Account.start()


def test_self_stop_in_on_start_is_final_for_a_spawned_actor(system: ActorSystem, kind: str) -> None:
    events, cond = event_list(system)
    bystander = system.spawn(Account, name="bystander")

    ref = system.spawn(StopsInStart, name="quits", process=kind == "process")
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "stopped" and e.name == "quits"
                                         for e in events), 10)

    assert not ref.is_alive()
    assert [e.kind for e in events if e.name == "quits"] == ["started", "stopped"]
    assert not any(e.kind == "escalated" for e in events)
    assert bystander.ask("x").result(5) == "x"


def test_ref_stop_is_final_and_a_crash_restarts_a_spawned_actor(system: ActorSystem,
                                                                kind: str) -> None:
    events, cond = event_list(system)
    crashing = system.spawn(Account, name="crashing", process=kind == "process")
    stopping = system.spawn(Account, name="stopping", process=kind == "process")

    crashing.tell("crash")
    stopping.stop()
    with cond:
        assert cond.wait_for(lambda: any(e.kind == "restarted" for e in events), 10)

    assert crashing.ask("x").result(10) == "x"
    assert not stopping.is_alive()
    assert [e.kind for e in events if e.name == "stopping"] == ["started", "stopped"]
    assert set(system.status()) == {"pykka", "crashing"}
