"""Suite-wide fixtures: every test fails if it leaks a thread or a process."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import psutil
import pytest
from support.processes import running_after

from actors import ActorSystem
from runtime import Bus

# Helper processes that multiprocessing starts once per interpreter and owns itself.
_MP_HELPERS = ("forkserver", "resource_tracker", "semaphore_tracker")
# Threads that outlive a test by design of a third party (Spark's py4j gateway).
_FOREIGN_THREADS = ("Thread-py4j", "py4j", "Spark", "pyspark")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", default=False,
        help="scale the reliability tests up to soak sizes",
    )


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    """An actor system for one test, shut down after it (modules may define their own)."""
    with ActorSystem() as actor_system:
        yield actor_system


@pytest.fixture
def bus() -> Iterator[Bus]:
    """A bus for one test, closed after it (modules whose tests need topics made first
    define their own)."""
    with Bus() as running:
        yield running


@pytest.fixture(params=["thread", "process"])
def kind(request: pytest.FixtureRequest) -> str:
    """``"thread"`` or ``"process"``: runs a test once per actor kind where both must agree.

    Spawn with ``process=kind == "process"``.
    """
    return str(request.param)


@pytest.fixture
def soak(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with --soak."""
    return bool(request.config.getoption("--soak"))


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def _children() -> set[int]:
    """Our descendants, except multiprocessing's own helpers and Spark's JVM subtree.

    Only *direct* children can be helpers: processes forked by the forkserver inherit
    its command line, and they are exactly the workers a leak check must see.
    """
    me = psutil.Process(os.getpid())
    exempt: set[int] = set()
    for child in me.children():
        line = _cmdline(child)
        if any(helper in line for helper in _MP_HELPERS):
            exempt.add(child.pid)
        elif line.split(" ")[0].endswith("java"):
            exempt.add(child.pid)
            exempt.update(p.pid for p in child.children(recursive=True))
    return {p.pid for p in me.children(recursive=True) if p.pid not in exempt}


def _threads() -> set[threading.Thread]:
    return {
        t for t in threading.enumerate()
        if not any(t.name.startswith(prefix) for prefix in _FOREIGN_THREADS) and not _py4j_owned(t)
    }


def _py4j_owned(thread: threading.Thread) -> bool:
    """Spark bridge: py4j's callback server (started once per process by the first
    streaming query listener, ``runtime.spark.register``) runs in a generically named
    thread that lives as long as the JVM gateway."""
    target = getattr(thread, "_target", None)
    owner = getattr(target, "__self__", None)
    return type(owner).__module__.startswith("py4j")


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves a thread or a child process running."""
    if request.node.get_closest_marker("allow_leaks"):
        yield
        return
    threads_before = _threads()
    children_before = _children()

    yield

    leaked_threads = []
    for thread in _threads() - threads_before:
        thread.join(timeout=5.0)
        if thread.is_alive():
            leaked_threads.append(thread.name)
    new_pids = _children() - children_before
    procs = []
    for pid in new_pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    alive = running_after(procs, timeout=5.0)  # a zombie left to PID 1 has exited
    for proc in alive:  # clean up after the failing test, then report it
        proc.kill()
    assert not leaked_threads, f"test leaked threads: {sorted(leaked_threads)}"
    assert not alive, f"test leaked processes: {[p.pid for p in alive]}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_leaks: the test owns long-lived shared resources")
