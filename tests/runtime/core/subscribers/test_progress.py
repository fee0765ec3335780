"""Progress slots: what a worker process reports of the hand-over it runs."""

from __future__ import annotations

import math

from runtime.core.subscribers._progress import NOT_STARTED, Progress, SlotWriter


def test_a_slot_reports_the_hand_over_its_worker_runs_and_the_delivery_it_is_on() -> None:
    progress = Progress(2)
    try:
        first, second = 1, 2  # the member's first two hand-overs
        writer = SlotWriter(progress.path, 1)
        assert progress.running_for(1, first) == NOT_STARTED  # nothing started yet

        writer.start(first)
        writer.words[writer.index_at] = 7

        assert progress.running_index(1, first) == 7
        assert 0 <= progress.running_for(1, first) < 60
        assert progress.running_for(1, second) == NOT_STARTED  # it waits behind the first
        assert progress.running_index(0, 1) is None  # the other slot's worker ran nothing
        writer.done()
        assert progress.running_index(1, first) is None  # finished: none was running
        writer.start(second)
        assert progress.running_for(1, first) == math.inf  # it is past the first
    finally:
        progress.close()


def test_a_closed_progress_reads_as_past_every_hand_over() -> None:
    progress = Progress(1)
    number = 1
    progress.close()
    progress.close()  # idempotent

    assert progress.running_for(0, number) == math.inf
    assert progress.running_index(0, number) is None
