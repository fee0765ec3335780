"""The topic runtime: a bus of topics with balanced groups, broadcast and dead letters."""

from runtime import errors
from runtime.broker._remote import RemoteBus, connect
from runtime.broker._server import BusServer
from runtime.core._bus import Bus
from runtime.core._message import Message
from runtime.core._outcome import Nack, Outcome, PublishReport
from runtime.core._settings import TopicSettings
from runtime.core._stats import TopicStats
from runtime.core._topic import Topic
from runtime.core.settlement._dead_letters import DeadLetter, DeadLetterQueue
from runtime.core.settlement._delivery import Delivery
from runtime.core.subscribers._subscription import PullSubscription, Subscription
from runtime.publisher._batching import BatchSettings
from runtime.publisher._flow_control import FlowControl
from runtime.publisher._publisher import Publisher

__all__ = [
    "BatchSettings",
    "Bus",
    "BusServer",
    "DeadLetter",
    "DeadLetterQueue",
    "Delivery",
    "FlowControl",
    "Message",
    "Nack",
    "Outcome",
    "PublishReport",
    "Publisher",
    "PullSubscription",
    "RemoteBus",
    "Subscription",
    "Topic",
    "TopicSettings",
    "TopicStats",
    "connect",
    "errors",
]
