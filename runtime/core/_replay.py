"""Replaying a dead letter to the one destination that failed it.

A letter goes back, as a new attempt of the same message id, only to the destination that
failed it: its balanced group, or its broadcast subscriber. Destinations that settled the
message (acked or not) never see it again. A letter whose destination is gone is
dead-lettered again as ``unsubscribed``; one no destination took (``no_subscribers``, or
refused on its way in) is published to the topic anew. The letters of one message that
are out at once travel under one sequence number and count as one message in the books.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from runtime.core._envelope import Envelope
from runtime.core._message import Message, parts_of
from runtime.core._publishing import PublishPath
from runtime.core.settlement._dead_letters import DeadLetter
from runtime.core.settlement._delivery import Delivery
from runtime.core.settlement._ledger import Ledger
from runtime.core.subscribers._ring import Ring
from runtime.core.subscribers._subscribers import Subscribers

__all__ = ["Replay"]


class Replay:
    """Sends dead letters of one topic back where they failed.

    Args:
        topic: the topic's name.
        ledger: the topic's books (a replayed letter is pending again until settled).
        ring: the broadcast ring (a broadcast subscriber's letter is queued for it alone).
        subscribers: the groups (a group's letter is requeued like a redelivery).
        path: the topic's publish path (a letter no destination took is published anew).
    """

    def __init__(
        self, *, topic: str, ledger: Ledger, ring: Ring, subscribers: Subscribers,
        path: PublishPath,
    ) -> None:
        self._topic = topic
        self._ledger = ledger
        self._ring = ring
        self._subscribers = subscribers
        self._path = path
        # Replayed entries carry negative sequence numbers: published ones count up from
        # 1, so the books can never confuse a replay with a message still tracked.
        self._seqs = itertools.count(-1, -1)

    def __call__(self, letter: DeadLetter) -> None:
        """Replay one letter (see the module docstring).

        Raises:
            TopicClosedError: the topic is closed (nothing of the letter was sent).
        """
        if letter.group is None and letter.subscriber_id < 0:
            self.publish_anew(letter)
            return
        envelope = self._envelope(letter)
        if letter.group is not None:
            self._ledger.reserve_replay(envelope, letter.message_id)
            # The redelivery path: back to the group with attempt + 1, or settled
            # ``unsubscribed`` (``closed``) when the group is gone (the topic closed).
            self._subscribers.redeliver(
                Delivery.settled(envelope, letter.subscriber_id, letter.group, letter.attempts,
                                 letter.reason, letter.error),
            )
            return
        reserve = self._reserver(envelope, letter.message_id)
        if not self._ring.replay(letter.subscriber_id, envelope, letter.attempts + 1, reserve):
            reserve()
            self._ledger.settle([Delivery.settled(
                envelope, letter.subscriber_id, None, letter.attempts, "unsubscribed",
            )])

    def publish_anew(self, letter: DeadLetter) -> None:
        """Publish ``letter``'s message to every destination of this topic, under a new id.

        Blocks while the topic applies its backpressure.

        Raises:
            TopicClosedError: the topic is closed.
        """
        message = letter.message
        if isinstance(message, Message):
            self._path.publish_envelopes(self._path.stamp_parts(*parts_of([message])))
        else:
            self._path.publish_one(message, letter.key, letter.attributes, None)

    def _reserver(self, envelope: Envelope, message_id: str) -> Callable[[], None]:
        return lambda: self._ledger.reserve_replay(envelope, message_id)

    def _envelope(self, letter: DeadLetter) -> Envelope:
        message: Any = letter.message
        seq = self._ledger.replay_seq(letter.message_id, self._seqs)
        if isinstance(message, Message):
            return (seq, letter.message_id, message.data, letter.key, letter.attributes,
                    self._topic, message.publish_time)
        return (seq, letter.message_id, message, letter.key, letter.attributes, self._topic, None)
