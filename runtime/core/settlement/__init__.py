"""What happens to a delivery once it is handed over.

- ``_delivery``: the `Delivery` a handler acks or nacks; ``_claims``: bulk operations on
  many of them (all acked?, claim or nack them all, fail one on a handler's behalf).
- ``_ledger``, ``_tracker``: the per-topic books of what is pending and the tracker actor that
  aggregates acks into each publish's `Outcome`.
- ``_admission``, ``_burial``: the ledger's ``max_pending`` slots and its dead-lettering
  (messages that never reached a destination, failed deliveries).
- ``_deadlines``: ack deadlines and redelivery.
- ``_dead_letters``: the bounded dead-letter queue and replay.
"""
