"""The topic core: the bus, its topics and everything between a publish and its outcome.

- ``_bus``, ``_topic``, ``_topic_actor``: the `Bus`, the `Topic` handle and the topic's actor.
- ``_publishing``: the topic's publish path (checks, throttle, ``max_pending``, fan-out).
- ``_settings``, ``_stats``, ``_message``, ``_envelope``, ``_outcome``, ``_timer``: the records
  they exchange and the one timer that drives ack deadlines; ``_future``: the lazy-condition
  `MessageFuture` of publish ids and outcomes.
- ``_block``: Publisher messages kept as columns from the topic to a worker's batch
  (`Block`), some columns kept as runs of one value or of consecutive numbers (`Runs`).
- ``subscribers/``: balanced groups, their members and worker pools, broadcast rings,
  subscriptions.
- ``settlement/``: deliveries, the ledger and tracker actor, deadlines, dead letters.

Imports run one way: ``core`` -> ``actors``' public API; nothing here imports the
publisher, the broker, Spark or the command line (``Topic.publisher`` and ``Bus.serve``
import theirs when called).
"""
