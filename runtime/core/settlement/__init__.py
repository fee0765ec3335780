"""What happens to a delivery once it is handed over.

- ``_delivery``: the `Delivery` a handler acks or nacks, its hand-over (a worker's as one
  `Tranche`); ``_claims``: bulk operations on many of them (all acked?, claim or nack them
  all, fail one on a handler's behalf).
- ``_ledger``, ``_tracker``: the per-topic books of what is pending (with the ``max_pending``
  slots, the ack deadlines and the dead-lettering of failed deliveries) and the tracker
  actor that aggregates acks into each publish's `Outcome`.
- ``_dead_letters``: the bounded dead-letter queue and replay.
"""
