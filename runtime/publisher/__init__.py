"""The batching `Publisher` (Google Pub/Sub style): batching, flow control, ordering keys.

- ``_publisher``: the user's handle (its checks and flow-control waits);
  ``_actor``: the Publisher actor behind it (batching, sending, settling), its mailbox
  messages and the one scheduler for ``max_latency`` (`Ticker`).
- ``_batching``: batch thresholds and the accumulation of messages into batches.
- ``_flow_control``: flow-control limits and the gate that applies them.
- ``_intake``: accepted messages (one shape: a run of messages) on their way to the
  actor, `PublishFuture` (the future of one ``publish``, held weakly) and `Bulk`, the
  one future of a ``publish_many`` call.
- ``_sequencer``: one batch in flight per ordering key; ``_flush``: flush and close.
- ``_validation``: the checks done at ``publish()`` (each publish gets a new
  `PublishFuture`, a core ``MessageFuture``: a `concurrent.futures.Future` that cannot
  be cancelled).

Imports run one way: ``publisher`` -> ``core``.
"""
