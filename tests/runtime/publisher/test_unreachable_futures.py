"""Futures nobody can read are not kept until their batch is confirmed; every other is.

A Publisher drops a publish future from its batch when the caller kept no reference,
weak reference, callback or waiter: nothing can observe it any more, and the next
``publish`` may return it again, still pending. Everything observable behaves as
before: kept futures resolve with their ids, callbacks of discarded futures run, and
every message reaches the topic in order.
"""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import Future, InvalidStateError

import pytest
from support.publisher import FakeTopic, batching

from actors import ActorSystem
from runtime import Bus, Delivery, Message
from runtime.core._future import MessageFuture, resolve, touch_mark
from runtime.errors import OrderingKeyPausedError, PublishError
from runtime.publisher._intake import Intake
from runtime.publisher._publisher import Publisher
from runtime.publisher._unreachable import drop_unreachable

COUNT = 200


def pending_futures() -> int:
    """How many unresolved publish futures exist in this process."""
    return sum(
        1 for item in gc.get_objects()
        if item.__class__ is MessageFuture and not item.done()
    )


def test_only_futures_held_nowhere_else_are_dropped() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(6)]
    held = futures[1]
    futures[2].add_done_callback(lambda _: None)
    referenced = weakref.ref(futures[3])
    with pytest.raises(TimeoutError):
        futures[4].result(timeout=0)  # builds its condition, as a waiter does

    kept = drop_unreachable(futures, [], 0)

    assert [future is None for future in kept] == [True, False, False, False, False, True]
    assert kept[1] is held and kept[3] is referenced()
    assert kept[2] is futures[2] and kept[4] is futures[4]


def test_a_list_where_every_future_is_held_comes_back_whole() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(50)]
    elsewhere = list(futures)

    assert drop_unreachable(futures, [], 0) == elsewhere


def test_a_list_where_no_future_is_held_comes_back_all_none() -> None:
    assert drop_unreachable([MessageFuture() for _ in range(50)], [], 0) == [None] * 50


@pytest.mark.parametrize("held", [False, True], ids=["none-held", "one-held"])
def test_dropped_pending_futures_become_spares_up_to_the_limit(held: bool) -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(50)]
    done = futures[10]
    done.set_result("settled already")
    del done
    kept_elsewhere = futures[20] if held else None
    spares: list[MessageFuture[str]] = [MessageFuture() for _ in range(5)]
    first_spares = list(spares)

    kept = drop_unreachable(futures, spares, 30)

    assert kept.count(None) == (49 if held else 50)
    assert kept[20] is kept_elsewhere
    assert len(spares) == 30 and spares[:5] == first_spares
    assert all(not spare.done() and spare is not kept_elsewhere for spare in spares)


def test_the_futures_a_list_holds_last_are_kept_and_the_rest_dropped() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(40)]
    mark = touch_mark()
    last_two = futures[-2:]
    spares: list[MessageFuture[str]] = []

    kept = drop_unreachable(futures, spares, 100, mark)

    assert kept[:38] == [None] * 38 and kept[38:] == last_two
    assert spares == futures[:38]


def test_a_held_future_amid_dropped_ones_keeps_its_place() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(40)]
    mark = touch_mark()
    held = (futures[3], futures[17])

    kept = drop_unreachable(futures, [], 0, mark)

    assert [index for index, future in enumerate(kept) if future is not None] == [3, 17]
    assert (kept[3], kept[17]) == held


@pytest.mark.parametrize("touch", ["callback", "waiter", "repr", "result", "exception"])
def test_a_future_touched_after_the_mark_is_checked_on_its_own(touch: str) -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(30)]
    mark = touch_mark()
    touched = futures[7]
    if touch == "callback":
        touched.add_done_callback(lambda _: None)
    elif touch == "waiter":
        with pytest.raises(TimeoutError):
            touched.result(timeout=0)
    elif touch == "repr":
        repr(touched)
    elif touch == "result":
        touched.set_result("by its holder")
    else:
        touched.set_exception(RuntimeError("by its holder"))
    del touched
    spares: list[MessageFuture[str]] = []

    kept = drop_unreachable(futures, spares, 100, mark)

    assert touch_mark() is not mark
    condition_made = touch != "result"  # Future.set_exception takes the condition
    assert [index for index, future in enumerate(kept) if future is not None] == (
        [7] if condition_made else [])
    assert len(spares) == 29 and futures[7] not in spares  # never a done one
    assert all(not spare.done() for spare in spares)


def test_a_weak_reference_keeps_a_future_while_the_mark_holds() -> None:
    futures: list[MessageFuture[str]] = [MessageFuture() for _ in range(10)]
    mark = touch_mark()
    referenced = weakref.ref(futures[4])

    kept = drop_unreachable(futures, [], 0, mark)

    assert touch_mark() is mark
    assert [future is not None for future in kept].count(True) == 1
    assert kept[4] is referenced()


def test_the_settler_resolving_is_no_touch_and_a_holder_setting_is() -> None:
    future: MessageFuture[str] = MessageFuture()
    mark = touch_mark()

    resolve(future, "id-1")

    assert touch_mark() is mark and future.result(timeout=0) == "id-1"
    with pytest.raises(InvalidStateError):
        future.set_result("again")
    assert touch_mark() is not mark


def test_an_intake_take_gives_the_mark_from_before_its_futures_were_added() -> None:
    intake = Intake()
    intake.take()
    future: MessageFuture[str] = MessageFuture()
    intake.add((b"m", {}, None, future, 1, False))
    future.add_done_callback(lambda _: None)  # touched, then let go: only the list holds it
    del future

    futures = intake.take()[3]
    kept = drop_unreachable(futures, [], 10, intake.since)

    assert kept == futures and kept[0] is not None
    assert intake.take()[3] == [] and intake.since is touch_mark()


def test_discarded_futures_do_not_wait_for_their_batch(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    gc.collect()  # an earlier test's pending futures in garbage cycles would go meanwhile
    before = pending_futures()
    with Publisher(topic, system=system, batching=batching(max_messages=10)) as pub:
        kept = {}
        for index in range(COUNT):
            future = pub.publish(b"m%d" % index)
            if index % 20 == 0:
                kept[index] = future
        del future
        topic.wait_for_batches(COUNT // 10)  # the actor took every message
        spares = list(pub._intake.spares)
        waiting = pending_futures() - before - len(spares)
        topic.stop_holding()
        pub.flush(timeout=5.0)

    assert waiting == len(kept)
    assert len(spares) == COUNT - len(kept)
    assert [m.data for batch in topic.batches for m in batch] == [
        b"m%d" % index for index in range(COUNT)]
    ids = [kept[index].result(timeout=0) for index in sorted(kept)]
    assert ids == [f"fake-{index + 1}" for index in sorted(kept)]


def test_callbacks_and_weak_references_keep_a_discarded_future(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    seen: list[str] = []
    with Publisher(topic, system=system, batching=batching(max_messages=10)) as pub:
        pub.publish(b"first").add_done_callback(lambda done: seen.append(done.result()))
        referenced = weakref.ref(pub.publish(b"second"))
        for index in range(8):
            pub.publish(b"filler-%d" % index)
        topic.wait_for_batches(1)
        second = referenced()  # still there: a weak reference could read it
        topic.stop_holding()
        pub.flush(timeout=5.0)

    assert seen == ["fake-1"]
    assert second is not None and second.result(timeout=0) == "fake-2"


def test_a_failed_batch_of_discarded_futures_pauses_its_key(system: ActorSystem) -> None:
    topic = FakeTopic(hold=True)
    settings = batching(max_messages=5)
    with Publisher(topic, system=system, batching=settings, message_ordering=True) as pub:
        for index in range(5):
            pub.publish(b"a%d" % index, ordering_key="A")
        later: list[Future[str]] = [pub.publish(b"a-late", ordering_key="A")]
        topic.wait_for_held(1)
        topic.fail(PublishError("refused", 13))

        with pytest.raises(OrderingKeyPausedError):
            later[0].result(timeout=5.0)
        pub.flush(timeout=5.0)  # an ask: the actor is done with the failure
        assert pub.paused_keys() == ["A"]
        assert [len(batch) for batch in topic.batches] == [5]


def test_a_spare_future_is_returned_pending_and_resolves_with_its_own_id(
    system: ActorSystem,
) -> None:
    topic = FakeTopic()
    with Publisher(topic, system=system, batching=batching(max_messages=10)) as pub:
        for index in range(10):
            pub.publish(b"dropped-%d" % index)
        pub.flush(timeout=5.0)
        spares = list(pub._intake.spares)
        again = pub.publish(b"again")
        reused = any(again is spare for spare in spares)
        del spares
        assert not again.done()
        pub.flush(timeout=5.0)

    assert reused
    assert again.result(timeout=0) == "fake-11"
    assert [m.data for batch in topic.batches for m in batch][-1] == b"again"


def test_spares_are_trimmed_to_twice_the_recent_peak_drain_and_a_little_more() -> None:
    intake = Intake()
    intake.spares += [MessageFuture() for _ in range(70_000)]

    assert intake.spare_room(100_000) == 65_536 and len(intake.spares) == 65_536
    rooms = [intake.spare_room(100) for _ in range(60)]

    # The peak loses an eighth per drain: 87,500, 76,563, ..., 34,363, 30,068.
    assert rooms[:8] == [65_536] * 8 and rooms[8] == 2 * 30_068 + 1_024
    assert rooms == sorted(rooms, reverse=True)
    assert rooms[-1] == 2 * 100 + 1_024 and len(intake.spares) == 1_224
    assert [intake.spare_room(4_000), intake.spare_room(0)] == [9_024, 2 * 3_500 + 1_024]


def test_a_closed_publisher_keeps_no_spares(system: ActorSystem) -> None:
    topic = FakeTopic()
    pub = Publisher(topic, system=system, batching=batching(max_messages=10))
    for index in range(10):
        pub.publish(b"dropped-%d" % index)
    pub.flush(timeout=5.0)
    had = len(pub._intake.spares)

    pub.close()

    assert had == 10 and pub._intake.spares == []


def _count_created(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list counting the `MessageFuture` objects built from now on."""
    created = [0]
    build = MessageFuture.__init__

    def counted(self: MessageFuture[str]) -> None:
        created[0] += 1
        build(self)

    monkeypatch.setattr(MessageFuture, "__init__", counted)
    return created


def _publish_racing(
    publisher: Publisher, threads_count: int, per_thread: int
) -> list[tuple[bytes, Future[str]]]:
    """Publish ``per_thread`` messages from each of ``threads_count`` threads started
    together; each keeps every third future (with its data) and drops the rest."""
    kept: list[list[tuple[bytes, Future[str]]]] = [[] for _ in range(threads_count)]
    start = threading.Barrier(threads_count)

    def publish_all(number: int) -> None:
        start.wait(10.0)
        for index in range(per_thread):
            data = b"%d-%d" % (number, index)
            future = publisher.publish(data)
            if index % 3 == 0:
                kept[number].append((data, future))

    workers = [threading.Thread(target=publish_all, args=(n,)) for n in range(threads_count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30.0)
    return [pair for one_thread in kept for pair in one_thread]


def _leave_spares(publisher: Publisher) -> None:
    """Publish a first round, dropping every future, and flush it: its futures, dropped
    while pending, are left as spares (else all of a racing round's publishes could end
    before the actor's first drain returned any)."""
    for index in range(2_000):
        publisher.publish(b"first-%d" % index)
    publisher.flush(30.0)
    assert publisher._intake.spares


def test_reused_futures_never_cross_messages_under_racing_publishers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four threads publish at once, each keeping every third future and dropping the
    rest (which the next publishes reuse): each kept future resolves with the id the
    topic gave its own message, and every message arrives once. Spares left by a first
    round make reuse certain whatever the scheduling."""
    threads_count, per_thread = 4, 3_000
    seen: dict[str, bytes] = {}
    lock = threading.Lock()
    created = _count_created(monkeypatch)

    def record(delivery: Delivery[Message]) -> None:
        if not delivery.message.data.startswith(b"first"):
            with lock:
                seen[delivery.message_id] = delivery.message.data

    with Bus() as bus:
        topic = bus.create_topic("t", balanced_capacity=10_000)
        topic.subscribe(record, group="g", auto_ack=True)
        publisher = topic.publisher()
        _leave_spares(publisher)
        created[0] = 0
        pairs = _publish_racing(publisher, threads_count, per_thread)
        publisher.flush(30.0)
        assert topic.join(30.0)

    assert sorted(seen.values()) == sorted(
        b"%d-%d" % (n, i) for n in range(threads_count) for i in range(per_thread))
    assert len(pairs) == threads_count * per_thread // 3
    assert all(seen[future.result(timeout=0)] == data for data, future in pairs)
    assert created[0] < threads_count * per_thread  # some publishes reused a future
