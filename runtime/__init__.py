"""The topic runtime: a bus of topics with balanced groups, broadcast and dead letters."""

from runtime import errors
from runtime._batching import BatchSettings
from runtime._bus import Bus
from runtime._dead_letters import DeadLetter, DeadLetterQueue
from runtime._delivery import Delivery
from runtime._flow_control import FlowControl
from runtime._message import Message
from runtime._outcome import Nack, Outcome, PublishReport
from runtime._publisher import Publisher
from runtime._remote import RemoteBus, connect
from runtime._server import BusServer
from runtime._settings import TopicSettings
from runtime._stats import TopicStats
from runtime._subscription import PullSubscription, Subscription
from runtime._topic import Topic

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
