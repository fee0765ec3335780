"""Staged publishing: exactly once per (producer, batch), abort, expiry."""

from __future__ import annotations

import pytest

from runtime.broker._staging import StagingArea


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sink:
    def __init__(self) -> None:
        self.published: list[list[str]] = []

    def __call__(self, parts: list[list[str]]) -> None:
        self.published.append([row for part in parts for row in part])


def test_commit_publishes_listed_parts_once() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "0", (0, 0), ["a", "b"])
    area.stage("q", "0", (1, 0), ["c"])

    first = area.commit("q", "0", [(0, 0), (1, 0)], sink)
    second = area.commit("q", "0", [(0, 0), (1, 0)], sink)

    assert (first, second) == (True, False)
    assert sink.published == [["a", "b", "c"]]
    assert area.staged() == 0


def test_only_successful_attempts_are_published() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "0", (0, 0), ["failed attempt"])
    area.stage("q", "0", (0, 1), ["retry"])

    area.commit("q", "0", [(0, 1)], sink)

    assert sink.published == [["retry"]]


def test_restaging_a_part_replaces_it() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "1", 0, ["old"])
    area.stage("q", "1", 0, ["new"])

    area.commit("q", "1", [0], sink)

    assert sink.published == [["new"]]


def test_stage_after_commit_is_refused() -> None:
    area: StagingArea[list[str]] = StagingArea()
    area.commit("q", "2", [], Sink())

    accepted = area.stage("q", "2", 0, ["late"])

    assert accepted is False
    assert area.staged() == 0


def test_failed_publish_keeps_the_stage_for_a_retry() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "3", 0, ["x"])

    def broken(parts: list[list[str]]) -> None:
        raise RuntimeError("topic closed")

    with pytest.raises(RuntimeError):
        area.commit("q", "3", [0], broken)
    retried = area.commit("q", "3", [0], sink)

    assert retried is True
    assert sink.published == [["x"]]


def test_abort_drops_the_batch() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("q", "4", 0, ["x"])
    area.stage("q", "4", 1, ["y"])

    dropped = area.abort("q", "4")
    area.commit("q", "4", [0, 1], sink)

    assert dropped == 2
    assert sink.published == [[]]


def test_producers_are_independent() -> None:
    area: StagingArea[list[str]] = StagingArea()
    sink = Sink()
    area.stage("a", "0", 0, ["from a"])
    area.stage("b", "0", 0, ["from b"])

    area.commit("a", "0", [0], sink)
    area.commit("b", "0", [0], sink)

    assert sink.published == [["from a"], ["from b"]]


def test_orphaned_stages_expire() -> None:
    clock = FakeClock()
    area: StagingArea[list[str]] = StagingArea(ttl=60.0, clock=clock)
    area.stage("q", "old", 0, ["x"])
    clock.now = 30.0
    area.stage("q", "new", 0, ["y"])

    clock.now = 61.0
    expired = area.expire()

    assert expired == 1
    assert area.staged() == 1


def test_committed_ids_are_remembered_within_the_window() -> None:
    area: StagingArea[list[str]] = StagingArea(remember=2)
    for batch in ("0", "1", "2"):
        area.commit("q", batch, [], Sink())

    assert not area.is_committed("q", "0")
    assert area.is_committed("q", "1") and area.is_committed("q", "2")
