"""Hand-over ack deadlines: FIFO order, timer arming, settled hand-overs skipped."""

from __future__ import annotations

from runtime.core.settlement._delivery import HandOver
from runtime.core.settlement._ledger import Deadlines


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def handover(hid: int) -> HandOver:
    result = HandOver(None, 1, "g")
    result.id = hid
    return result


def test_only_the_first_deadline_arms_the_timer() -> None:
    clock = FakeClock()
    deadlines = Deadlines(5.0, clock)

    first = deadlines.add(handover(1))
    clock.now += 1
    second = deadlines.add(handover(2))

    assert (first, second) == (105.0, None)


def test_pop_expired_returns_live_handovers_past_their_deadline_in_order() -> None:
    clock = FakeClock()
    deadlines = Deadlines(5.0, clock)
    handovers = [handover(i) for i in range(1, 5)]
    for index, item in enumerate(handovers):
        clock.now = 100.0 + index
        deadlines.add(item)
    live = {h.id: h for h in handovers if h.id != 2}  # 2 settled early

    clock.now = 107.5
    expired = deadlines.pop_expired(live)

    assert [h.id for h in expired] == [1, 3]
    assert [h.deadline for h in expired] == [105.0, 107.0]
    assert deadlines.rearm() == 108.0


def test_settled_handovers_at_the_head_do_not_hold_the_timer() -> None:
    clock = FakeClock()
    deadlines = Deadlines(5.0, clock)
    for hid in (1, 2):
        deadlines.add(handover(hid))

    expired = deadlines.pop_expired({})

    assert expired == []
    assert deadlines.rearm() is None
    assert deadlines.add(handover(3)) == 105.0  # the timer is disarmed: arm it again


def test_no_ack_timeout_means_no_deadline() -> None:
    deadlines = Deadlines(None, FakeClock())
    item = handover(1)

    assert deadlines.add(item) is None
    assert deadlines.pop_expired({1: item}) == []
    assert deadlines.rearm() is None


def test_a_renewed_handover_expires_at_its_new_deadline_only() -> None:
    clock = FakeClock()
    deadlines = Deadlines(4.0, clock)
    renewed, plain = handover(1), handover(2)
    live = {1: renewed, 2: plain}
    deadlines.add(renewed)
    deadlines.add(plain)

    clock.now = 103.5
    assert deadlines.due(renewed)
    deadlines.add(renewed)  # renewed: a second entry
    clock.now = 104.5
    first = deadlines.pop_expired(live)
    wake_at = deadlines.rearm()
    clock.now = 107.5
    second = deadlines.pop_expired(live)

    assert first == [plain]
    assert wake_at == 107.5
    assert second == [renewed]


def test_a_deadline_is_due_for_renewal_once_a_quarter_has_run() -> None:
    clock = FakeClock()
    deadlines = Deadlines(4.0, clock)
    item = handover(1)
    deadlines.add(item)

    clock.now = 100.9
    early = deadlines.due(item)
    clock.now = 101.1
    late = deadlines.due(item)

    assert (early, late) == (False, True)
    assert not Deadlines(None, clock).due(item)
