"""Durable topics on Redis Streams (``backend="redis"``, DESIGN §3.9).

- ``_topic``: `RedisTopic`, the `Topic` interface over one Redis topic; ``_publishing``
  its publish path, ``_members`` this process's subscribers, ``_watch`` outcomes and
  dead-letter callbacks, ``_dead_letters`` the shared dead-letter stream.
- ``_consumer``, ``_broadcast``, ``_member``, ``_workers``: how a member reads and settles
  (a group's consumer, a broadcast reader, the handler loop and a pull source, worker
  processes); ``_partitions`` the partitions a member owns on a topic of several
  (leases, rebalancing, takeover) and a broadcast reader of every partition.
- ``_delivery``: `RedisDelivery` and its fenced settlement.
- ``_scripts``, ``_keys``, ``_records``, ``_declare``, ``_connection``: the Lua scripts,
  the key layout, the stream fields, declare semantics (whose records also list the
  topics a Redis holds, for the command line's ``--redis``) and the client.

Nothing here is imported by ``import runtime``: the bus imports it when it is given a
Redis connection, and this package imports ``redis`` then.
"""

from runtime.redis._connection import Connection
from runtime.redis._declare import recorded_settings, topic_names
from runtime.redis._delivery import RedisDelivery
from runtime.redis._records import Codec
from runtime.redis._topic import RedisTopic

__all__ = ["Codec", "Connection", "RedisDelivery", "RedisTopic", "recorded_settings",
           "topic_names"]
