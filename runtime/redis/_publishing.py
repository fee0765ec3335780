"""The publish path of a Redis topic: checks, encoding, one script call per batch."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.core._message import Message
from runtime.core._settings import TopicSettings, check_timeout
from runtime.errors import MessageTypeError, TopicClosedError, WouldBlock
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys, message_id_of, partition_of
from runtime.redis._records import Codec

__all__ = ["Accepted", "Publishing"]

_FULL_WAIT = (0.001, 0.05)  # a publisher held by max_pending re-checks, backing off between


@dataclass(frozen=True, slots=True)
class Accepted:
    """What the publish script did with a batch.

    Attributes:
        ids: the message ids, in order.
        groups: the balanced groups it was enqueued for (empty: none).
        readers: broadcast readers attached at publish.
        dead: True when nobody could take it (dead-lettered ``no_subscribers``).
    """

    ids: list[str]
    groups: list[str]
    readers: int
    dead: bool


class Publishing:
    """Checks and sends batches of messages to the topic's stream.

    Args:
        topic: the topic's name.
        settings: its settings.
        connection: the bus's connection.
        keys: the topic's keys (of partition 0; the others follow from the name).
        codec: encodes bodies.
        closing: set when the topic closes (wakes a publisher held by ``max_pending``).
        clock: the time source of ``timeout``.
    """

    def __init__(self, topic: str, settings: TopicSettings, connection: Connection,
                 keys: TopicKeys, codec: Codec, closing: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._topic = topic
        self._type = settings.message_type
        self._connection = connection
        parts = [keys] + [TopicKeys.of(topic, p) for p in range(1, settings.partitions)]
        self._keys = [[part.stream, part.groups, part.readers, part.stats, part.remaining,
                       part.dead] for part in parts]
        self._partitions = settings.partitions
        self._turn = 0  # the partition of this process's next unkeyed batch
        self._limits = [settings.max_pending or 0, settings.dead_letter_limit or 0]
        self._max_pending = settings.max_pending
        self._throttle = settings.throttle
        self._pending = 0  # the pending gauge as the last publish saw it (for the throttle)
        self._codec = codec
        self._closing = closing
        self._clock = clock

    def fields(self, message: Any, key: str | None, attributes: Mapping[str, str] | None,
               ) -> tuple[bytes, str, str, str]:
        """Check one message and encode it.

        Raises:
            TopicClosedError: the topic is closed.
            MessageTypeError: not an instance of ``message_type``.
            TypeError: a key that is not a str, attributes not a mapping of str to str.
        """
        if self._closing.is_set():
            raise TopicClosedError(self._topic)
        expected = self._type
        if expected is not None and not isinstance(message, expected):
            raise MessageTypeError(self._topic, expected.__qualname__, type(message).__qualname__)
        if key is not None and not isinstance(key, str):
            raise TypeError(f"a key must be a str or None, got {type(key).__qualname__}")
        if attributes is not None and (not isinstance(attributes, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in attributes.items())):
            raise TypeError("attributes must be a mapping of str to str")
        return self._codec.fields(message, key, attributes)

    def _throttled(self, deadline: float | None) -> int:
        """The throttle (DESIGN 3.2 step 3) on the pending gauge the last publish saw:
        with a free-slot ratio in (0, throttle], wait ``1 / (max_pending * ratio)`` seconds
        (bounded by the deadline; a close ends it) and return 1 to be counted, else 0."""
        limit = self._max_pending
        if not self._throttle or limit is None:
            return 0
        ratio = (limit - self._pending) / limit
        if not 0 < ratio <= self._throttle:
            return 0
        delay = 1.0 / (limit * ratio)
        if deadline is not None:
            delay = min(delay, max(deadline - self._clock(), 0.0))
        if self._closing.wait(delay):
            raise TopicClosedError(self._topic)
        return 1

    def check_open_for_messages(self) -> None:
        """Check that a Publisher batch (of `Message` objects) may be published.

        Raises:
            TopicClosedError: the topic is closed.
            MessageTypeError: ``message_type`` accepts no `Message`.
        """
        if self._closing.is_set():
            raise TopicClosedError(self._topic)
        expected = self._type
        if expected is not None and not issubclass(Message, expected):
            raise MessageTypeError(self._topic, expected.__qualname__, "Message")

    @staticmethod
    def message_fields(datas: list[bytes], attributes: list[dict[str, str]],
                       keys: Sequence[str | None]) -> list[tuple[bytes, str, str, str]]:
        """The fields of a Publisher batch: its data, keys and attributes were checked
        by the Publisher, so this only lays them out (the per-message hot path)."""
        dumps = json.dumps
        return [(data, "m", key or "", dumps(attrs) if attrs else "")
                for data, attrs, key in zip(datas, attributes, keys, strict=True)]

    def _spread(self, batch: Sequence[tuple[bytes, str, str, str]],
                ) -> list[tuple[int, list[int] | None]]:
        """Where a batch goes: ``(partition, positions)`` per partition it touches (None:
        the whole batch). A keyed message goes to its key's partition; the unkeyed ones of
        a batch go together to the next partition in this process's turn."""
        if self._partitions == 1:
            return [(0, None)]
        self._turn = turn = (self._turn + 1) % self._partitions
        parts: dict[int, list[int]] = {}
        for position, (_, _, key, _) in enumerate(batch):
            partition = partition_of(key, self._partitions) if key else turn
            parts.setdefault(partition, []).append(position)
        if len(parts) == 1:
            return [(partition, None) for partition in parts]
        return [*parts.items()]

    def send(self, batches: Sequence[Sequence[tuple[bytes, str, str, str]]],
             timeout: float | None) -> list[Accepted]:
        """Publish each batch in one script call per partition it touches, all in one
        round trip; a call that finds ``max_pending`` reached (in its partition) waits for
        room (and is sent again).

        Raises:
            TopicClosedError: the topic closed while waiting.
            WouldBlock: ``timeout`` passed while waiting.
            BackendUnavailableError: Redis did not answer.
            ValueError: ``timeout`` is not finite.
        """
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else self._clock() + timeout
        # One call per (batch, partition, positions in the batch).
        todo = [(index, partition, positions) for index, batch in enumerate(batches)
                for partition, positions in self._spread(batch)]
        parts: list[list[Accepted]] = [[] for _ in batches]
        ids: list[list[str]] = [[] for _ in batches]
        wait = _FULL_WAIT[0]
        throttled = self._throttled(deadline)
        while True:
            calls = [(self._keys[partition],
                      _arguments(self._limits, throttled if n == 0 else 0,
                                 batches[index] if positions is None
                                 else [batches[index][p] for p in positions]))
                     for n, (index, partition, positions) in enumerate(todo)]
            throttled = 0
            replies = self._connection.pipelined("PUBLISH", calls)
            full = []
            for call, reply in zip(todo, replies, strict=True):
                status = reply[0]
                if status == b"full":
                    full.append(call)
                    continue
                index, partition, positions = call
                groups = [name.decode() for name in reply[4:4 + reply[1]]]
                entry_ids = [i.decode() for i in reply[4 + reply[1]:]]
                if positions is None:
                    ids[index] = (entry_ids if partition == 0
                                  else [message_id_of(partition, i) for i in entry_ids])
                else:
                    if not ids[index]:
                        ids[index] = [""] * len(batches[index])
                    for position, entry_id in zip(positions, entry_ids, strict=True):
                        ids[index][position] = message_id_of(partition, entry_id)
                parts[index].append(Accepted([], groups, int(reply[2]), status == b"none"))
                self._pending = int(reply[3])
            if not full:
                return [_merged(batch_ids, accepted) for batch_ids, accepted in zip(ids, parts,
                                                                                    strict=True)]
            todo = full
            self._pending = self._max_pending or 0
            if deadline is not None and self._clock() >= deadline:
                raise WouldBlock(f"topic {self._topic!r}: max_pending reached")
            left = wait if deadline is None else min(wait, max(deadline - self._clock(), 0))
            if self._closing.wait(left):
                raise TopicClosedError(self._topic)
            wait = min(wait * 2, _FULL_WAIT[1])


def _merged(ids: list[str], parts: list[Accepted]) -> Accepted:
    """A batch's `Accepted` from those of its partitions' calls."""
    if len(parts) == 1:
        return Accepted(ids, parts[0].groups, parts[0].readers, parts[0].dead)
    groups = list(dict.fromkeys(group for part in parts for group in part.groups))
    return Accepted(ids, groups, max(part.readers for part in parts),
                    all(part.dead for part in parts))


def _arguments(limits: list[int], throttled: int,
               batch: Sequence[tuple[bytes, str, str, str]]) -> list[Any]:
    """The publish script's arguments for ``batch``: bodies alone when every message is a
    `Message` without key or attributes (one argument each, the common Publisher case)."""
    if all(kind == "m" and not key and not attributes for _, kind, key, attributes in batch):
        return [*limits, len(batch), throttled, "p", *[fields[0] for fields in batch]]
    return [*limits, len(batch), throttled, "m", *[part for fields in batch for part in fields]]
