"""A Publisher batch fails alone: batches sent together are confirmed or failed one by one."""

from __future__ import annotations

from concurrent.futures import wait
from typing import Any

import pytest

from runtime import Bus
from runtime.errors import MessageTypeError
from runtime.publisher._batching import BatchSettings


class _Picky(type):
    """A type that takes bytes as a kind (a Publisher may publish to it) and refuses,
    message by message, the data that starts with ``b"bad"``."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, bytes) and not instance.startswith(b"bad")

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, bytes)


class NotBad(metaclass=_Picky):
    """Bytes that do not start with ``b"bad"``."""


@pytest.mark.parametrize("keys", [1, 8])
def test_one_keys_refused_batch_pauses_only_that_key(keys: int) -> None:
    with Bus() as bus:
        topic = bus.create_topic("picky", message_type=NotBad, ack_timeout=None)
        pull = topic.subscription(group="readers")
        pub = topic.publisher(message_ordering=True,
                              batching=BatchSettings(max_messages=100, max_latency=60.0))
        good = {f"k{n}": [pub.publish(b"good-%d-%d" % (n, i), ordering_key=f"k{n}")
                          for i in range(3)] for n in range(keys)}
        bad = pub.publish(b"bad", ordering_key="k-bad")
        pub.flush(timeout=10.0)  # every open batch goes in the same send

        wait([bad, *[f for futures in good.values() for f in futures]], timeout=10.0)
        delivered = sorted(pull.receive(timeout=5.0).message.data for _ in range(3 * keys))
        paused = pub.paused_keys()
        pub.close(timeout=10.0)

    assert isinstance(bad.exception(timeout=0), MessageTypeError)
    assert paused == ["k-bad"]
    for futures in good.values():
        ids = [future.result(timeout=0) for future in futures]
        assert ids == sorted(ids, key=int) and len(set(ids)) == 3
    assert delivered == sorted(b"good-%d-%d" % (n, i) for n in range(keys) for i in range(3))


def test_a_refused_batch_among_unkeyed_batches_fails_alone() -> None:
    with Bus() as bus:
        topic = bus.create_topic("picky-unkeyed", message_type=NotBad, ack_timeout=None)
        pub = topic.publisher(batching=BatchSettings(max_messages=2, max_latency=60.0))
        before = [pub.publish(b"a%d" % n) for n in range(4)]
        refused = [pub.publish(b"bad"), pub.publish(b"ok-but-with-bad")]
        after = [pub.publish(b"b%d" % n) for n in range(4)]
        pub.flush(timeout=10.0)
        pub.close(timeout=10.0)

    assert [type(f.exception(timeout=0)) for f in refused] == [MessageTypeError] * 2
    assert all(f.exception(timeout=0) is None for f in before + after)
    assert len({f.result(timeout=0) for f in before + after}) == 8
