"""A Redis topic's dead letters: a stream any process can read, drain and replay."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from runtime.core.settlement._dead_letters import DeadLetter, republish_drained
from runtime.redis._connection import Connection
from runtime.redis._keys import TopicKeys, entry_of
from runtime.redis._records import Codec
from runtime.redis._watch import Watch

__all__ = ["RedisDeadLetters"]


class RedisDeadLetters:
    """The `DeadLetterQueue` interface over the topic's ``dead`` streams, one per partition
    (read together, oldest first).

    Each stream is bounded by ``dead_letter_limit`` as each letter is written (the newest
    kept). Every process that opens the topic sees the same letters.

    Args:
        connection: the bus's connection.
        keys: the topic's keys.
        topic: the topic's name.
        codec: decodes the letters.
        watch: runs the `on_dead_letter` callback.
        replayer: ``replayer(topic) -> republish(dead_letter)``, as for the in-memory queue.
        partitions: the topic's partitions.
    """

    def __init__(self, connection: Connection, keys: TopicKeys, topic: str, codec: Codec,
                 watch: Watch, replayer: Callable[[Any], Callable[[DeadLetter], None]],
                 partitions: int = 1) -> None:
        self._connection = connection
        self._keys = [keys.dead] + [TopicKeys.of(topic, p).dead for p in range(1, partitions)]
        self._topic = topic
        self._codec = codec
        self._watch = watch
        self._replayer = replayer

    def __len__(self) -> int:
        with self._connection.guard():
            pipe = self._connection.client.pipeline(transaction=False)
            for key in self._keys:
                pipe.xlen(key)
            return sum(int(length) for length in pipe.execute())

    def __iter__(self) -> Iterator[DeadLetter]:
        """A snapshot, oldest first; removes nothing."""
        with self._connection.guard():
            pipe = self._connection.client.pipeline(transaction=False)
            for key in self._keys:
                pipe.xrange(key)
            found = pipe.execute()
        return iter(self._letters(found))

    def __repr__(self) -> str:
        return f"RedisDeadLetters(topic={self._topic!r})"

    @property
    def evicted(self) -> int:
        """Evictions are not counted on Redis (the stream trims itself): always 0."""
        return 0

    def drain(self) -> list[DeadLetter]:
        """Empty the stream, then return what it held, oldest first (atomically: a letter
        written meanwhile is either returned or kept)."""
        found = []
        for key in self._keys:  # each partition's stream in one script (one slot)
            drained = self._connection.run("DRAIN", [key], [])
            found.append([(entry_id, dict(zip(flat[::2], flat[1::2], strict=True)))
                          for entry_id, flat in drained])
        return self._letters(found)

    def clear(self) -> None:
        """Drop every dead letter."""
        with self._connection.guard():
            for key in self._keys:
                self._connection.client.delete(key)

    def on_dead_letter(self, callback: Callable[[DeadLetter], Any] | None) -> None:
        """Call ``callback(dead_letter)`` for each letter written from now on, by any
        process (within the watch's poll period); None: off. Its exceptions are logged."""
        self._watch.on_dead_letter(callback)

    def replay(self, *, topic: Any = None) -> int:
        """Drain and replay every letter, oldest first; return the count.

        On this topic a letter goes back only to the group that failed it, as a new
        attempt of the same message id (a letter of a group that is gone is dead-lettered
        again as ``unsubscribed``); a letter no group took is published anew. With another
        ``topic``, every letter is published there anew.

        Raises:
            TopicNotFoundError: no topic of that name.
            TopicClosedError: the target topic is closed.
        """
        republish = self._replayer(topic)
        return republish_drained(self.drain(), republish, self._restore)

    def _restore(self, items: list[DeadLetter]) -> None:
        """Put letters a failed replay did not send back (as new entries, oldest first)."""
        for item in items:
            self._write(item)

    def _write(self, item: DeadLetter) -> None:
        from runtime.redis._records import optional

        body, kind, key, attributes = self._codec.fields(item.message, item.key, item.attributes)
        record: list[Any] = [
            "m", item.message_id, "g", item.group or "", "s", item.subscriber_id, "r", item.reason,
            "e", optional(item.error), "n", item.attempts, "x", optional(item.exception),
            "t", optional(item.traceback), "b", body, "f", kind, "k", key, "a", attributes]
        partition, entry_id = entry_of(item.message_id)
        if partition >= len(self._keys):
            partition, entry_id = 0, item.message_id
        record[1] = entry_id
        with self._connection.guard():
            self._connection.client.xadd(self._keys[partition],
                                         dict(zip(record[::2], record[1::2], strict=True)))

    def _letters(self, found: list[list[tuple[bytes, dict[bytes, bytes]]]]) -> list[DeadLetter]:
        """The letters of every partition's stream (``found`` in partition order), oldest
        first."""
        letters = [self._codec.dead_letter(self._topic, entry_id.decode(), fields, partition)
                   for partition, entries in enumerate(found) for entry_id, fields in entries]
        if len(found) > 1:
            letters.sort(key=lambda letter: letter.at)
        return letters
