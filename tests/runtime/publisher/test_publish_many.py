"""publish_many: many messages, one call, one future of all their ids in order."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime import Bus
from runtime.errors import FlowControlError, OrderingKeyPausedError, PublishError, TopicClosedError
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher


def test_publish_many_resolves_with_every_id_in_order(system: ActorSystem) -> None:
    topic = FakeTopic()
    with Publisher(topic, system=system, batching=batching(max_messages=7)) as pub:
        before = pub.publish(b"before")
        bulk = pub.publish_many([b"m%d" % n for n in range(50)], attributes={"a": "b"})
        after = pub.publish(b"after")
        pub.flush(timeout=10.0)

        ids = bulk.result(timeout=0)

    assert ids == [f"fake-{n}" for n in range(2, 52)]
    assert (before.result(timeout=0), after.result(timeout=0)) == ("fake-1", "fake-52")
    sent = [m for batch in topic.batches for m in batch]
    assert [m.data for m in sent] == [b"before", *[b"m%d" % n for n in range(50)], b"after"]
    assert all(m.attributes == {"a": "b"} for m in sent[1:51])
    assert [len(batch) for batch in topic.batches][:7] == [7] * 7  # batched like any others


def test_publish_many_of_nothing_resolves_at_once(system: ActorSystem) -> None:
    with Publisher(FakeTopic(), system=system) as pub:
        assert pub.publish_many([]).result(timeout=0) == []


@pytest.mark.parametrize(("datas", "attributes", "key", "text"), [
    ([b"ok", "not bytes"], None, None, "Message data must be bytes"),
    ([b"ok", b"x" * (10 * 1024 * 1024 + 1)], None, None, "Message size exceeds maximum of 10MB"),
    ([b"ok"], {"n": 1}, None, "attribute"),
    ([b"ok"], None, "k" * 1025, "Ordering key exceeds"),
])
def test_publish_many_validates_every_message_before_publishing_any(
    system: ActorSystem, datas: list[object], attributes: object, key: str | None, text: str,
) -> None:
    topic = FakeTopic()
    with Publisher(topic, system=system) as pub:
        with pytest.raises(PublishError) as refused:
            pub.publish_many(datas, attributes=attributes, ordering_key=key)  # type: ignore[arg-type]

        pub.flush(timeout=10.0)
        assert refused.value.code == 3 and text in str(refused.value)
        assert topic.batches == [] and pub.outstanding == (0, 0)


def test_publish_many_on_a_paused_key_raises(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    pub = Publisher(topic, system=system, batching=batching(max_latency=0), message_ordering=True)
    failing = pub.publish(b"a", ordering_key="k")
    topic.wait_for_held(1)
    topic.fail(TopicClosedError("fake"))
    assert isinstance(failing.exception(timeout=5.0), TopicClosedError)

    with pytest.raises(OrderingKeyPausedError):
        pub.publish_many([b"b", b"c"], ordering_key="k")
    pub.close(timeout=5.0)


def test_a_failed_batch_fails_the_bulk_future_and_the_rest_still_settles(
    system: ActorSystem,
) -> None:
    topic = FakeTopic(hold=True)
    pub = Publisher(topic, system=system, batching=batching(max_messages=2))
    bulk = pub.publish_many([b"a", b"b", b"c", b"d"])
    topic.wait_for_held(2)
    topic.fail(TopicClosedError("fake"))  # the first batch of two
    topic.confirm()

    assert isinstance(bulk.exception(timeout=5.0), TopicClosedError)
    pub.flush(timeout=5.0)
    assert pub.outstanding == (0, 0)
    pub.close(timeout=5.0)


def test_flow_control_applies_per_message(system: ActorSystem) -> None:
    topic = FakeTopic()
    flow = FlowControl(max_outstanding_messages=10)
    with Publisher(topic, system=system, batching=batching(max_messages=4),
                   flow_control=flow) as pub:
        seen: list[int] = []
        send = topic._publish_batch

        def counted(messages: list[object]) -> Future[list[str]]:
            seen.append(pub.outstanding[0])
            return send(messages)  # type: ignore[arg-type]

        topic._publish_batch = counted  # type: ignore[method-assign]
        ids = pub.publish_many([b"%d" % n for n in range(200)]).result(timeout=10.0)

    assert ids == [f"fake-{n}" for n in range(1, 201)]
    assert max(seen) <= 10 and sum(len(batch) for batch in topic.batches) == 200


def test_a_refusal_past_the_first_message_fails_the_future_not_the_call(
    system: ActorSystem,
) -> None:
    topic = FakeTopic(hold=True)
    flow = FlowControl(max_outstanding_messages=3, limit_exceeded="error")
    pub = Publisher(topic, system=system, batching=batching(max_messages=10), flow_control=flow)

    bulk = pub.publish_many([b"%d" % n for n in range(5)])
    with pytest.raises(FlowControlError):  # nothing of this call fits: raised
        pub.publish_many([b"x"])

    assert isinstance(bulk.exception(timeout=5.0), FlowControlError)
    flushing = threading.Thread(target=pub.flush, args=(10.0,))
    flushing.start()
    topic.wait_for_held(1)
    topic.confirm()
    flushing.join(10.0)
    assert [len(batch) for batch in topic.batches] == [3]  # the three admitted went out
    assert pub.outstanding == (0, 0)
    pub.close(timeout=5.0)


def test_publish_many_on_a_topic_delivers_each_message_with_its_id() -> None:
    with Bus() as bus:
        topic = bus.create_topic("bulk", ack_timeout=None)
        pull = topic.subscription(group="readers")
        with topic.publisher() as pub:
            datas = [b"m%d" % n for n in range(100)]  # within the group's capacity
            ids = pub.publish_many(datas, ordering_key="k").result(timeout=10.0)
        received = {}
        for _ in range(100):
            delivery = pull.receive(timeout=5.0)
            received[delivery.message_id] = (delivery.message.data, delivery.key)
            delivery.ack()

    assert len(set(ids)) == 100
    assert [received[message_id] for message_id in ids] == [(data, "k") for data in datas]
