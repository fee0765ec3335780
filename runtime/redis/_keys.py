"""Where a Redis topic keeps its state: the key names of one partition."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

__all__ = ["PARKED", "TopicKeys", "entry_of", "message_id_of", "partition_of"]

PARKED = "__parked"
"""The consumer that holds deliveries handed back (nacked for a retry, or returned by a
closing member) until a member claims them again."""


@dataclass(frozen=True, slots=True)
class TopicKeys:
    """The keys of one partition of a topic, all in one hash slot.

    Every key shares the hash tag ``{actorbus:<topic>:<partition>}``, so one Lua script
    may touch them all, also on a Redis Cluster (where each partition may live on its own
    master). Topic-wide records (settings) live with partition 0.

    Attributes:
        stream: the messages (one stream entry per message; its id is the message id).
        groups: the set of balanced group names (each a consumer group of ``stream``).
        readers: the broadcast readers attached now, each with when it last read (server
            milliseconds; a hash).
        stats: the topic's counters and the ``pending`` gauge (a hash).
        remaining: per message published to several groups, the groups still to settle.
        failed: per such message, the nacks recorded so far.
        dead: the dead letters (a stream bounded by ``dead_letter_limit``).
        settled: completed messages (acked ids in bulk, nacked ones with their nacks),
            which publishing processes tail to resolve their outcomes.
        settings: the settings the topic was declared with (a hash).
        committed: the (producer, batch) pairs a staged write published into this
            partition (a hash; see `staged`).
        takes: where the read tasks of a Spark source's batches ended, by consumer and
            batch, where its last committed batch ended, and the entries its read tasks
            dead-lettered (a hash; see `runtime.spark.redis._source`).
    """

    stream: str
    groups: str
    readers: str
    stats: str
    remaining: str
    failed: str
    dead: str
    settled: str
    settings: str
    committed: str
    takes: str

    @classmethod
    def of(cls, topic: str, partition: int = 0) -> TopicKeys:
        """The keys of ``topic``'s partition ``partition``."""
        tag = f"{{actorbus:{topic}:{partition}}}"
        return cls(
            stream=f"{tag}:stream", groups=f"{tag}:groups", readers=f"{tag}:readers",
            stats=f"{tag}:stats", remaining=f"{tag}:remaining", failed=f"{tag}:failed",
            dead=f"{tag}:dead", settled=f"{tag}:settled", settings=f"{tag}:settings",
            committed=f"{tag}:committed", takes=f"{tag}:takes",
        )

    def owner(self, group: str) -> str:
        """The lease naming the member of ``group`` that owns this partition (a topic of
        several partitions)."""
        return f"{self.stream.removesuffix(':stream')}:owner:{group}"

    def members(self, group: str) -> str:
        """The live members of ``group`` (a sorted set scored by lease expiry; kept with
        partition 0)."""
        return f"{self.stream.removesuffix(':stream')}:members:{group}"

    def all(self) -> list[str]:
        """Every key (what `destroy` deletes)."""
        return [self.stream, self.groups, self.readers, self.stats, self.remaining,
                self.failed, self.dead, self.settled, self.settings, self.committed,
                self.takes]

    def staged(self, producer: str, batch: str, part: str) -> str:
        """The key of one part a writer staged for (``producer``, ``batch``): a list of
        message fields in this partition's slot, published by the commit script."""
        return f"{self.stream[:-len(':stream')]}:staged:{producer}:{batch}:{part}"

    def settling(self) -> list[str]:
        """The keys of the settle and reclaim scripts, in their order."""
        return [self.stream, self.stats, self.remaining, self.failed, self.dead, self.settled]


def partition_of(key: str | bytes, partitions: int) -> int:
    """The partition of ordering key ``key``: a stable hash (CRC-32 of its UTF-8 bytes),
    the same in every process and on every host (and for the Spark sink's rows)."""
    return zlib.crc32(key.encode() if isinstance(key, str) else key) % partitions


def message_id_of(partition: int, entry_id: str) -> str:
    """The message id of stream entry ``entry_id`` of ``partition``: the entry id itself in
    partition 0, else ``"<partition>/<entry id>"`` (entry ids repeat across streams)."""
    return entry_id if partition == 0 else f"{partition}/{entry_id}"


def entry_of(message_id: str) -> tuple[int, str]:
    """The inverse of `message_id_of`: ``(partition, entry id)`` (partition 0 for an id
    of no partition)."""
    partition, _, entry_id = message_id.rpartition("/")
    if not partition.isdigit():
        return 0, message_id
    return int(partition), entry_id
