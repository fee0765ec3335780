"""The batching `Publisher` (Google Pub/Sub style): batching, flow control, ordering keys.

- ``_publisher``: the user's handle (its checks and flow-control waits);
  ``_actor``: the Publisher actor behind it (batching, sending, settling).
- ``_batching``, ``_ticker``: batch thresholds and the one scheduler for ``max_latency``.
- ``_flow_settings``, ``_flow_control``, ``_intake``: flow-control limits and the gate that
  applies them.
- ``_sequencer``: one batch in flight per ordering key; ``_flush``: flush and close.
- ``_messages``, ``_validation``: message records and the checks done at ``publish()``
  (each publish gets a new `concurrent.futures.Future`).

Imports run one way: ``publisher`` -> ``core``.
"""
