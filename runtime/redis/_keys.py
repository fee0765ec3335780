"""Where a Redis topic keeps its state: the key names of one partition."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PARKED", "TopicKeys"]

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
        readers: the set of broadcast readers attached now.
        stats: the topic's counters and the ``pending`` gauge (a hash).
        remaining: per message published to several groups, the groups still to settle.
        failed: per such message, the nacks recorded so far.
        dead: the dead letters (a stream bounded by ``dead_letter_limit``).
        settled: completed messages (acked ids in bulk, nacked ones with their nacks),
            which publishing processes tail to resolve their outcomes.
        settings: the settings the topic was declared with (a hash).
        committed: the (producer, batch) pairs a staged write published into this
            partition (a hash; see `staged`).
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

    @classmethod
    def of(cls, topic: str, partition: int = 0) -> TopicKeys:
        """The keys of ``topic``'s partition ``partition``."""
        tag = f"{{actorbus:{topic}:{partition}}}"
        return cls(
            stream=f"{tag}:stream", groups=f"{tag}:groups", readers=f"{tag}:readers",
            stats=f"{tag}:stats", remaining=f"{tag}:remaining", failed=f"{tag}:failed",
            dead=f"{tag}:dead", settled=f"{tag}:settled", settings=f"{tag}:settings",
            committed=f"{tag}:committed",
        )

    def all(self) -> list[str]:
        """Every key (what `destroy` deletes)."""
        return [self.stream, self.groups, self.readers, self.stats, self.remaining,
                self.failed, self.dead, self.settled, self.settings, self.committed]

    def staged(self, producer: str, batch: str, part: str) -> str:
        """The key of one part a writer staged for (``producer``, ``batch``): a list of
        message fields in this partition's slot, published by the commit script."""
        return f"{self.stream[:-len(':stream')]}:staged:{producer}:{batch}:{part}"

    def settling(self) -> list[str]:
        """The keys of the settle and reclaim scripts, in their order."""
        return [self.stream, self.stats, self.remaining, self.failed, self.dead, self.settled]
