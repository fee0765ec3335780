"""Publisher -> topic -> one balanced thread member, tracked end to end (``pipeline_inproc``).

The candidate publishes ``count`` small bytes messages through a `Publisher` with default
batching into a topic (default settings) whose only destination is a balanced group with
one thread member that acks each delivery; the round ends when the Publisher flushed and
``topic.join`` saw nothing pending. The baseline is what the same number of messages costs
as bare pykka tells to one actor (``count`` tells and a final ask). The extra row
``pipeline_inproc/limit`` compares with `HandLoop`: the same bookkeeping (an id, a dict of
pending, a handler, ack -> pop and count) written by hand in one thread, the practical
limit of doing it in Python.

`acking_pipeline` and `run_pipeline` are shared with the other Publisher scenarios.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pykka

from runtime import Bus, Delivery, Publisher, Topic

from ._harness import Comparison, Profile, Scenario
from ._measure import interleave, payloads, per_second
from ._thread_actors import PykkaCounter

__all__ = ["SCENARIOS", "HandLoop", "acking_pipeline", "acknowledge", "ignore", "run_pipeline"]

TIMEOUT = 120.0


def acknowledge(delivery: Delivery[Any]) -> None:
    """The member's handler: ack at once."""
    delivery.ack()


def ignore(delivery: Delivery[Any]) -> None:
    """The workers' handler: nothing (``auto_ack`` acks on return)."""


@contextmanager
def acking_pipeline(
    name: str, *, workers: int = 0, **publisher_options: Any,
) -> Iterator[tuple[Topic[Any], Publisher]]:
    """A bus with topic ``name``: one balanced thread member acking (or, with ``workers``,
    that many worker processes auto-acking `ignore`), and a Publisher.

    The bus (and with it the members, the topic's actors and the Publisher) is closed on exit.
    """
    with Bus() as bus:
        topic = bus.create_topic(name)
        if workers:
            topic.subscribe(ignore, group="workers", workers=workers, auto_ack=True)
        else:
            topic.subscribe(acknowledge, group="members")
        yield topic, topic.publisher(**publisher_options)


def run_pipeline(topic: Topic[Any], publisher: Publisher, messages: list[bytes]) -> None:
    """Publish ``messages``, flush, wait until all are settled; check all were acked.

    Raises:
        RuntimeError: a message was not delivered and acked, or the wait timed out.
    """
    publish = publisher.publish
    before = topic.stats().delivered
    for message in messages:
        publish(message)
    publisher.flush(TIMEOUT)
    settle(topic, before, len(messages))


def settle(topic: Topic[Any], before: int, count: int) -> None:
    """Wait until ``topic`` is idle and check ``count`` more messages were fully acked.

    Raises:
        RuntimeError: the wait timed out or a message was not acked everywhere.
    """
    if not topic.join(TIMEOUT):
        raise RuntimeError(f"{topic.name}: still pending after {TIMEOUT} s")
    delivered = topic.stats().delivered - before
    if delivered != count:
        raise RuntimeError(f"{topic.name}: {delivered} of {count} messages were acked")


class _Handover:
    """What `HandLoop` hands its handler: the message and a way to ack it."""

    __slots__ = ("loop", "message", "message_id")

    def __init__(self, loop: HandLoop, message_id: str, message: bytes) -> None:
        self.loop = loop
        self.message_id = message_id
        self.message = message

    def ack(self) -> None:
        self.loop.settle(self.message_id)


class HandLoop:
    """The tracked pipeline written by hand in one thread: ids, pending dict, handler, acks."""

    def __init__(self, handler: Callable[[_Handover], None]) -> None:
        self.pending: dict[str, bytes] = {}
        self.acked = 0
        self._handler = handler
        self._next_id = 0

    def publish(self, message: bytes) -> None:
        self._next_id += 1
        message_id = str(self._next_id)
        self.pending[message_id] = message
        self._handler(_Handover(self, message_id, message))

    def settle(self, message_id: str) -> None:
        del self.pending[message_id]
        self.acked += 1


def _run_loop(messages: list[bytes]) -> None:
    loop = HandLoop(lambda handover: handover.ack())
    publish = loop.publish
    for message in messages:
        publish(message)
    if loop.acked != len(messages) or loop.pending:
        raise RuntimeError(f"the hand-written loop acked {loop.acked} of {len(messages)}")


def tell_pykka(ref: pykka.ActorRef[PykkaCounter], messages: list[bytes]) -> None:
    """A tell of each message to a pykka counter, then one ask that waits for the drain."""
    tell = ref.tell
    before = ref.ask(None, block=False).get(timeout=TIMEOUT)
    for message in messages:
        tell(message)
    after = ref.ask(None, block=False).get(timeout=TIMEOUT)
    if after - before != len(messages) + 1:
        raise RuntimeError(f"the pykka actor handled {after - before - 1} of {len(messages)}")


def measure_inproc(profile: Profile) -> tuple[Comparison, ...]:
    """Messages per second through the tracked pipeline vs pykka tells vs the hand loop."""
    count = profile.count(100_000, minimum=500)
    messages = payloads(count)
    theirs = PykkaCounter.start()
    try:
        with acking_pipeline("bench-pipeline") as (topic, publisher):
            medians = interleave({
                "ours": lambda: per_second(count, partial(run_pipeline, topic, publisher, messages)),
                "pykka": lambda: per_second(count, partial(tell_pykka, theirs, messages)),
                "loop": lambda: per_second(count, partial(_run_loop, messages)),
            }, repeats=profile.repeats)
    finally:
        theirs.stop(timeout=TIMEOUT)
    return (
        Comparison(value=medians["ours"], baseline_value=medians["pykka"]),
        Comparison(value=medians["ours"], baseline_value=medians["loop"], suffix="limit",
                   baseline="hand-written 1-thread loop: id, pending dict, ack"),
    )


SCENARIOS = (
    Scenario(name="pipeline_inproc", unit="msg/s",
             baseline="pykka tell to 1 actor (Publisher->topic->1 acking member)",
             target=0.5, measure=measure_inproc),
)
