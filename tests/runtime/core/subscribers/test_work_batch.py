"""What crosses the pipe to a worker process (columns out, a count or settlements back),
and how the group sizes its hand-overs to workers."""

from __future__ import annotations

import gc
import pickle
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from support.groups import FakeEndpoint, group_of, publish_chunk

from runtime import Delivery, Message
from runtime.core._envelope import Envelope
from runtime.core._message import NO_ATTRIBUTES
from runtime.core.settlement._delivery import ACKED, NACKED, HandOver, Tranche
from runtime.core.subscribers._progress import Progress
from runtime.core.subscribers._workers import (
    FIRST_BATCH,
    HANDOVER_BYTES,
    HANDOVER_WORK,
    PROCESS_BATCH,
    SLOW_BATCH,
    ProcessEndpoint,
    WorkBatch,
    WorkerActor,
    _claim_acked,
    _claim_settled,
)
from runtime.errors import SettlementError

PLAIN: Envelope = (1, "1", {"order": 7}, "k1", {"a": "b"}, "orders", None)
PUBLISHED: Envelope = (2, "2", b"data", None, {"x": "y"}, "orders", 1234.5)


def handed_over(*envelopes: Envelope) -> tuple[HandOver, list[Delivery[Any]]]:
    handover = HandOver(None, 5, "g")
    deliveries: list[Delivery[Any]] = [
        Delivery(e, handover, i, attempt) for i, (e, attempt) in enumerate(
            zip(envelopes, range(1, len(envelopes) + 1), strict=True))
    ]
    handover.pending = dict(enumerate(deliveries))
    return handover, deliveries


def test_worker_side_deliveries_read_exactly_like_the_parents() -> None:
    _, sent = handed_over(PLAIN, PUBLISHED)

    batch = pickle.loads(pickle.dumps(WorkBatch.of(5, "g", "orders", sent)))
    received = batch.deliveries(HandOver(None, 5, "g"))

    def view(d: Delivery[Any]) -> tuple[Any, ...]:
        return (d.message, d.message_id, d.key, d.attributes, d.topic, d.attempt,
                d.subscriber_id, d.group)

    assert [view(d) for d in received] == [view(d) for d in sent]
    assert received[1].message == Message(data=b"data", attributes={"x": "y"},
                                          message_id="2", publish_time=1234.5)


def test_worker_side_deliveries_without_attributes_share_the_read_only_empty_dict() -> None:
    bare: Envelope = (3, "3", b"bare", None, None, "orders", 1234.5)
    _, sent = handed_over(bare, bare)

    batch = pickle.loads(pickle.dumps(WorkBatch.of(5, "g", "orders", sent)))
    received = batch.deliveries(HandOver(None, 5, "g"))

    assert batch.attributes is None  # the column travels as one value
    assert [d.attributes for d in received] == [{}, {}]
    assert all(d.attributes is NO_ATTRIBUTES for d in [*sent, *received])
    assert all(d.message.attributes is NO_ATTRIBUTES for d in received)


def _numbered(*seqs: int) -> list[Envelope]:
    """Published messages' envelopes: the id is the number (no id of their own)."""
    return [(seq, None, f"m{seq}".encode(), None, None, "orders", 1234.5) for seq in seqs]


@pytest.mark.parametrize(("seqs", "compact"), [
    ((7, 8, 9, 10), True),  # one run: travels as a range
    ((5, 7, 6, 8), False),  # a permutation of a run (racing publishers): as numbers
    ((1000, 1002), False),
])
def test_messages_travel_by_number_and_read_their_ids_from_it(
    seqs: tuple[int, ...], compact: bool,
) -> None:
    envelopes = _numbered(*seqs)
    batch = WorkBatch.of_envelopes(5, "g", "orders", envelopes, None)

    assert (type(batch.seqs) is range) is compact and batch.ids is None
    assert list(batch.seqs) == list(seqs)
    received = pickle.loads(pickle.dumps(batch)).deliveries(HandOver(None, 5, "g"))
    assert [d.message_id for d in received] == [str(seq) for seq in seqs]
    assert [d.message.data for d in received] == [f"m{seq}".encode() for seq in seqs]
    assert [d.message.message_id for d in received] == [str(seq) for seq in seqs]


def test_a_replayed_message_keeps_its_own_id_in_the_worker() -> None:
    replayed: Envelope = (-1, "42", b"again", None, None, "orders", 1234.5)
    envelopes = [*_numbered(7), replayed]
    batch = WorkBatch.of_envelopes(5, "g", "orders", envelopes, [1, 2])

    received = pickle.loads(pickle.dumps(batch)).deliveries(HandOver(None, 5, "g"))

    assert [d.message_id for d in received] == ["7", "42"]
    assert [d.message.message_id for d in received] == ["7", "42"]
    assert [d.attempt for d in received] == [1, 2]


def test_a_run_of_numbers_pickles_smaller_than_its_ids() -> None:
    envelopes = _numbered(*range(1_000_000, 1_004_096))
    batch = WorkBatch.of_envelopes(5, "g", "orders", envelopes, None)
    ids = [str(e[0]) for e in envelopes]

    with_ids = len(pickle.dumps((ids, batch.payloads)))
    assert len(pickle.dumps(batch)) < with_ids - 4 * 4096


def test_worker_answers_a_count_when_the_whole_batch_was_acked() -> None:
    _, sent = handed_over(PLAIN, PUBLISHED)
    worker = WorkerActor(lambda delivery: None, True)

    elapsed, reply = worker.on_receive(WorkBatch.of(5, "g", "orders", sent))

    assert reply == 2 and 0 <= elapsed < 5


@pytest.mark.parametrize("fail", [None, "2"])
def test_a_settled_batch_leaves_no_garbage_cycle_in_the_worker(fail: str | None) -> None:
    def handler(delivery: Delivery[Any]) -> None:
        if delivery.message_id == fail:
            raise ValueError("bad data")

    _, sent = handed_over(PLAIN, PUBLISHED)
    batch = WorkBatch.of(5, "g", "orders", sent, ack_timeout=30.0)
    worker = WorkerActor(handler, True)
    gc.collect()
    gc.disable()
    try:
        _, reply = worker.on_receive(batch)
        unreachable = gc.collect()  # what only the collector could have freed
    finally:
        gc.enable()

    assert reply == 2 if fail is None else len(reply) == 2
    assert unreachable == 0


def test_worker_answers_settlements_when_one_was_not_acked() -> None:
    def handler(delivery: Delivery[Any]) -> None:
        if delivery.message_id == "2":
            raise ValueError("bad data")

    _, sent = handed_over(PLAIN, PUBLISHED)
    worker = WorkerActor(handler, True)

    _, reply = worker.on_receive(WorkBatch.of(5, "g", "orders", sent))

    assert isinstance(reply, list)
    assert [r[:4] for r in reply] == [(0, True, None, None), (1, False, "error", "bad data")]
    exception, text = reply[1][4]
    assert exception == "ValueError" and "raise ValueError" in text and len(reply[0]) == 4


@pytest.mark.parametrize("lease", [None, 30.0])
def test_worker_answers_settlements_when_its_handler_nacked_one(lease: float | None) -> None:
    def handler(delivery: Delivery[Any]) -> None:
        if delivery.message_id == "2":
            delivery.nack("why")
        else:
            delivery.ack()

    _, sent = handed_over(PLAIN, PUBLISHED, PLAIN)
    worker = WorkerActor(handler, False)

    _, reply = worker.on_receive(WorkBatch.of(5, "g", "orders", sent, ack_timeout=lease))

    assert reply == [(0, True, None, None), (1, False, "nack", "why"), (2, True, None, None)]


@pytest.mark.parametrize("count", [2, 3])  # the slow handler last, or one after it
def test_a_lease_that_runs_out_during_a_handler_acks_nothing_more_and_runs_nothing_more(
    monkeypatch: pytest.MonkeyPatch, count: int,
) -> None:
    from runtime.core.subscribers import _member, _work_batch

    now = [100.0]
    monkeypatch.setattr(_member, "_monotonic", lambda: now[0])
    monkeypatch.setattr(_work_batch, "_monotonic", lambda: now[0])
    seen: list[str] = []

    def handler(delivery: Delivery[Any]) -> None:
        seen.append(delivery.message_id)
        if delivery.message_id == "2":
            now[0] += 60.0  # the second handler outlives the lease

    _, sent = handed_over(*(PLAIN, PUBLISHED, PLAIN)[:count])
    batch = WorkBatch.of(5, "g", "orders", sent, ack_timeout=30.0)
    handover = HandOver(None, 5, "g")
    received = batch.deliveries(handover, now[0] + 27.0)
    _member.run_handler(handler, True, handover, received, log=False)

    assert seen == ["1", "2"]  # a third never ran
    assert [d.state for d in received] == [ACKED, NACKED, NACKED][:count]
    assert [d.timed_out for d in received] == [False, True, True][:count]
    assert not handover.pending


def test_a_lease_another_thread_expired_runs_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop reads the clock after each handler; a late claim from another thread can
    expire the lease just after that reading: the next delivery must not run."""
    from runtime.core.subscribers import _member, _work_batch

    now = [100.0]
    monkeypatch.setattr(_member, "_monotonic", lambda: now[0])
    monkeypatch.setattr(_work_batch, "_monotonic", lambda: now[0])
    seen: list[str] = []
    refused: list[SettlementError] = []

    def handler(delivery: Delivery[Any]) -> None:
        seen.append(delivery.message_id)
        if delivery.message_id == "2":
            now[0] += 60.0  # a claim past the deadline (as a late ack from another thread)
            try:
                delivery.ack()
            except SettlementError as exc:
                refused.append(exc)
            now[0] -= 60.0  # the loop's own reading, taken just before that claim

    _, sent = handed_over(PLAIN, PUBLISHED, PLAIN)
    batch = WorkBatch.of(5, "g", "orders", sent, ack_timeout=30.0)
    handover = HandOver(None, 5, "g")
    received = batch.deliveries(handover, now[0] + 27.0)
    _member.run_handler(handler, True, handover, received, log=False)

    assert seen == ["1", "2"] and len(refused) == 1  # the third never ran
    assert [d.state for d in received] == [ACKED, NACKED, NACKED]
    assert [d.timed_out for d in received] == [False, True, True]
    assert not handover.pending


def test_a_count_settles_only_what_the_parent_still_holds() -> None:
    handover, deliveries = handed_over(PLAIN, PUBLISHED, PLAIN)
    assert deliveries[1]._expire("timeout")  # its deadline won before the answer came

    claimed = _claim_acked(deliveries)

    assert claimed == [deliveries[0], deliveries[2]]
    assert [d.state for d in deliveries] == [ACKED, NACKED, ACKED]
    assert deliveries[1].timed_out
    assert handover.pending == {}


def test_settlements_apply_reasons_and_skip_what_was_already_claimed() -> None:
    _, deliveries = handed_over(PLAIN, PUBLISHED, PLAIN)
    assert deliveries[0]._expire("closed")

    claimed = _claim_settled(deliveries, [(0, True, None, None), (1, False, "nack", "why"),
                                          (2, True, None, None)])

    assert claimed == [deliveries[1], deliveries[2]]
    assert (deliveries[1].reason, deliveries[1].error) == ("nack", "why")
    assert [d.state for d in deliveries] == [NACKED, NACKED, ACKED]


def _chunk(start: int) -> list[Envelope]:
    return [(n, str(n), n, None, {}, "t", None) for n in range(start, start + 100)]


def test_a_chunk_is_split_evenly_unless_every_member_prefers_it_whole() -> None:
    slow, other = FakeEndpoint(1, whole=False), FakeEndpoint(2, whole=True)
    publish_chunk(group_of(slow, other), _chunk(0))

    assert (slow.sizes, other.sizes) == ([50], [50])


def test_cheap_members_take_whole_chunks_in_turn() -> None:
    first, second = FakeEndpoint(1, whole=True), FakeEndpoint(2, whole=True)
    group = group_of(first, second)

    for start in (0, 100, 200, 300):
        publish_chunk(group, _chunk(start))

    assert (first.sizes, second.sizes) == ([100, 100], [100, 100])


@pytest.fixture
def progress() -> Iterator[Progress]:
    slots = Progress(1)
    yield slots
    slots.close()


def _endpoint(progress: Progress, worker: Any = None, **settings: Any) -> ProcessEndpoint:
    return ProcessEndpoint(
        1, 1, worker, None, None,  # type: ignore[arg-type]
        progress=(progress, 0), requeue=lambda handover, items: None, **settings,
    )


def test_a_worker_s_cost_is_unknown_until_its_first_answer(progress: Progress) -> None:
    endpoint = _endpoint(progress)

    assert endpoint.cost is None  # no batch answered yet: its chunks are split


@pytest.mark.parametrize(("cost", "whole"), [(1e-6, True), (1e-5, False), (0.02, False)])
def test_a_chunk_goes_whole_only_while_it_costs_members_less_than_split_worth(
    cost: float, whole: bool,
) -> None:
    first, second = FakeEndpoint(1), FakeEndpoint(2)
    first.cost = second.cost = cost  # 100 messages: 100 µs, 1 ms, 2 s (SPLIT_WORTH: 200 µs)

    publish_chunk(group_of(first, second), _chunk(0))

    assert sorted([first.sizes, second.sizes]) == ([[], [100]] if whole else [[50], [50]])


def test_a_worker_s_load_is_what_it_has_not_done_of_its_running_hand_over(progress: Progress) -> None:
    endpoint = _endpoint(progress)
    endpoint._running = [object()]  # type: ignore[list-item]
    endpoint._since = time.monotonic()
    unknown = endpoint.left(100)  # its handler's time not known yet

    endpoint.cost = 1e-9  # a nanosecond a message: all done by now
    done = endpoint.left(100)
    endpoint.cost = 10.0  # ten seconds a message: none done yet
    begun = endpoint.left(100)
    endpoint.cost, endpoint._running = 1e-9, []
    idle = endpoint.left(100)  # nothing running: its unsettled ones are not begun

    assert (unknown, done, begun, idle) == (100, 0, 100, 100)


def test_a_hand_over_holds_about_5_ms_of_handler_time_within_its_bounds(progress: Progress) -> None:
    endpoint = _endpoint(progress)
    assert endpoint.cap() == FIRST_BATCH  # the handler's time is not known yet
    assert endpoint.window == 2 * PROCESS_BATCH

    sizes = []
    for cost in (1e-6, 1e-5, 2e-4, 0.05):
        endpoint.cost = cost
        sizes.append(endpoint.cap())
    assert sizes == [PROCESS_BATCH, int(HANDOVER_WORK / 1e-5), SLOW_BATCH, SLOW_BATCH]
    assert SLOW_BATCH < sizes[1] < PROCESS_BATCH  # ~500: 5 ms of 10 µs messages

    bounded = _endpoint(progress, ack_timeout=0.1)
    bounded.cost = 1e-3  # a quarter of the ack timeout holds 25 such messages
    assert bounded.cap() == 25


class _Unanswered:
    """A worker's ref that takes every ask and never answers it."""

    def __init__(self) -> None:
        self.asked: list[WorkBatch] = []

    def ask(self, message: WorkBatch, timeout: float | None) -> Future[Any]:
        self.asked.append(message)
        return Future()


def _push(endpoint: ProcessEndpoint, payloads: list[Any]) -> None:
    """Hand ``endpoint`` one tranche of ``payloads`` (its worker never answers)."""
    envelopes: list[Envelope] = [
        (n, str(n), payload, None, None, "t", 1.0) for n, payload in enumerate(payloads, 1)]
    endpoint.push(Tranche(None, 1, "g", envelopes), [])


def test_a_hand_over_of_large_payloads_holds_about_8_mib(progress: Progress) -> None:
    endpoint = _endpoint(progress, _Unanswered())
    endpoint.cost = 1e-6  # cheap: 1,024 messages by time alone

    _push(endpoint, [b"x" * 100, b"y" * 100])
    assert endpoint._size == 101 and endpoint.cap() == PROCESS_BATCH
    endpoint._size = None
    _push(endpoint, [b"x" * 2**20] * 3)  # 1 MiB each
    assert endpoint.cap() == HANDOVER_BYTES // (2**20 + 1) == 7
    endpoint._size = None
    _push(endpoint, [b"x" * 10 * 2**20])  # the largest Publisher message
    assert endpoint.cap() == 1
    # objects other than bytes: their size is not known, the last estimate stays
    _push(endpoint, [{"order": 1}, {"order": 2}])
    assert endpoint._size == 10 * 2**20 + 1


def test_the_payload_estimate_follows_a_change_of_size_gradually(progress: Progress) -> None:
    endpoint = _endpoint(progress, _Unanswered())

    _push(endpoint, [b"x" * 1000])
    assert endpoint._size == 1001  # (first + last) / 2 + 1: one payload is both
    _push(endpoint, [b"x" * 9999])
    assert endpoint._size == 1001 + (10000 - 1001) // 4  # a quarter of the way to the new size


def test_each_hand_over_updates_the_payload_estimate(progress: Progress) -> None:
    worker = _Unanswered()
    endpoint = _endpoint(progress, worker)
    envelopes: list[Envelope] = [(n, str(n), b"x" * 4000, None, None, "t", 1.0) for n in range(3)]

    endpoint.push(Tranche(None, 1, "g", envelopes), [])

    assert len(worker.asked) == 1 and list(worker.asked[0].payloads) == [b"x" * 4000] * 3
    assert endpoint._size == 4001
