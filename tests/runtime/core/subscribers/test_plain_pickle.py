"""A hand-over's columns pickled without the memo where that changes nothing, as usual
everywhere else."""

from __future__ import annotations

import pickle
import pickletools
from typing import Any

from runtime.core._block import Runs
from runtime.core.subscribers._work_batch import WorkBatch, dumps_plain


class Tagged(bytes):
    """Publisher data of a bytes subclass (it carries an attribute)."""

    tag = "t"


def batch(payloads: list[Any], stamps: Any, **columns: Any) -> WorkBatch:
    values: dict[str, Any] = {
        "seqs": range(10, 10 + len(payloads)), "ids": None, "keys": None, "attributes": None,
        "attempts": None, "ack_timeout": 30.0,
    }
    values.update(columns)
    return WorkBatch(7, "g", "orders", payloads=payloads, stamps=stamps, **values)


def opcodes(data: bytes) -> set[str]:
    return {op.name for op, _, _ in pickletools.genops(data)}


def test_publisher_messages_cross_without_the_memo_and_load_equal() -> None:
    payloads = [bytes([n]) * 100 for n in range(6)]
    sent = batch(
        payloads, Runs([1.5, 2.5], [4, 2]), seqs=Runs([10, 40], [4, 2], 1),
        keys=Runs(["k1", "k2"], [4, 2]), attributes=[{"a": "b"}, None, None, None, None, {}],
        attempts=[1, 1, 2, 1, 1, 3],
    )

    rebuild, (plain,) = sent.__reduce__()
    received = pickle.loads(pickle.dumps(sent, protocol=5))

    assert "MEMOIZE" not in opcodes(plain) and "BINPUT" not in opcodes(plain)
    assert rebuild(plain) == received
    assert received.payloads == payloads
    assert list(received.seqs) == [10, 11, 12, 13, 40, 41]
    assert list(received.keys) == ["k1"] * 4 + ["k2"] * 2
    assert list(received.stamps) == [1.5] * 4 + [2.5] * 2
    assert received.attributes == [{"a": "b"}, None, None, None, None, {}]
    assert (received.attempts, received.ack_timeout, received.group) == ([1, 1, 2, 1, 1, 3],
                                                                         30.0, "g")


def test_one_stamp_for_all_also_crosses_without_the_memo() -> None:
    sent = batch([b"x" * 50, b"y" * 50], 1234.5)

    _, (plain,) = sent.__reduce__()

    assert "MEMOIZE" not in opcodes(plain)
    assert pickle.loads(pickle.dumps(sent)) == sent


def test_published_objects_keep_what_they_share_and_their_cycles() -> None:
    shared = {"order": 7}
    looped: list[Any] = ["head"]
    looped.append(looped)
    sent = batch([shared, shared, looped], None)

    received = pickle.loads(pickle.dumps(sent, protocol=5))

    first, second, loop = received.payloads
    assert first == {"order": 7} and first is second
    assert loop[0] == "head" and loop[1] is loop


def test_a_mix_of_published_objects_and_publisher_data_keeps_them_as_they_are() -> None:
    shared = ["same"]
    sent = batch([b"data", shared, shared], [1.5, None, None])

    received = pickle.loads(pickle.dumps(sent, protocol=5))

    assert received.payloads == [b"data", ["same"], ["same"]]
    assert received.payloads[1] is received.payloads[2]


def test_publisher_data_of_a_bytes_subclass_keeps_its_type() -> None:
    sent = batch([b"plain", Tagged(b"tagged")], 1.5)

    received = pickle.loads(pickle.dumps(sent, protocol=5))

    assert received.payloads == [b"plain", b"tagged"]
    assert type(received.payloads[1]) is Tagged and received.payloads[1].tag == "t"


def test_dumps_plain_gives_up_on_a_cycle_and_on_objects_of_other_classes() -> None:
    looped: list[Any] = []
    looped.append(looped)

    assert dumps_plain(looped, 5) is None
    assert dumps_plain([b"a", Tagged(b"b")], 5) is None
    assert dumps_plain([b"a", object()], 5) is None
    plain = dumps_plain(([b"ab", b"ab"], range(3), Runs(["k"], [2]), {"x": "y"}, 1.5, None), 5)
    assert plain is not None
    loaded = pickle.loads(plain)
    assert loaded[0] == [b"ab", b"ab"] and loaded[0][0] is not loaded[0][1]  # no memo
    assert loaded[1:] == (range(3), ["k", "k"], {"x": "y"}, 1.5, None)
