"""What crosses the pipe to a worker process: columns out, a count or settlements back."""

from __future__ import annotations

import pickle
from typing import Any

from runtime import Delivery, Message
from runtime._delivery import ACKED, NACKED, HandOver
from runtime._envelope import Envelope
from runtime._workers import WorkBatch, WorkerActor, _claim_acked, _claim_settled

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


def test_worker_answers_a_count_when_the_whole_batch_was_acked() -> None:
    _, sent = handed_over(PLAIN, PUBLISHED)
    worker = WorkerActor(lambda delivery: None, True)

    assert worker.on_receive(WorkBatch.of(5, "g", "orders", sent)) == 2


def test_worker_answers_settlements_when_one_was_not_acked() -> None:
    def handler(delivery: Delivery[Any]) -> None:
        if delivery.message_id == "2":
            raise ValueError("bad data")

    _, sent = handed_over(PLAIN, PUBLISHED)
    worker = WorkerActor(handler, True)

    reply = worker.on_receive(WorkBatch.of(5, "g", "orders", sent))

    assert reply == [(0, True, None, None), (1, False, "error", "bad data")]


def test_a_count_settles_only_what_the_parent_still_holds() -> None:
    handover, deliveries = handed_over(PLAIN, PUBLISHED, PLAIN)
    assert deliveries[1]._expire("timeout")  # its deadline won before the answer came

    claimed = _claim_acked(handover, deliveries)

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
