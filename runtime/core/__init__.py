"""The topic core: the bus, its topics and everything between a publish and its outcome.

- ``_bus``, ``_topic``, ``_topic_actor``: the `Bus`, the `Topic` handle (publish, the batch
  entry point, subscribe, close) and the topic's actor that publishes batches in order.
- ``_publishing``: the topic's publish path (checks, throttle, ``max_pending``, fan-out).
- ``_settings``, ``_stats``, ``_message``, ``_envelope``, ``_outcome``: the records they
  exchange (and `check_timeout`, the one check of a ``timeout=`` argument); ``_future``:
  `MessageFuture`, the `Future` of publish ids and outcomes (it cannot be cancelled).
- ``_block``: Publisher messages kept as columns from the topic to a worker's batch
  (`Block`), some columns kept as runs of one value or of consecutive numbers (`Runs`).
- ``_replay``, ``_held``, ``_closing``: dead letters sent back, what holds publishers,
  Publishers closed with their topic.
- ``subscribers/``: balanced groups, their members and worker pools, broadcast rings,
  subscriptions.
- ``settlement/``: deliveries, the ledger and tracker actor, deadlines, dead letters.

Imports run one way: ``core`` -> ``actors``' public API; nothing here imports the
publisher, the broker, Spark or the command line (``Topic.publisher`` and ``Bus.serve``
import theirs when called).
"""
