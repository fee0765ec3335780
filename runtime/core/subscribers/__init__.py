"""Who receives a topic's messages.

- ``_group``, ``_member``, ``_gate``: a balanced group actor (and how it queues messages,
  by key among its members), its members, and what publishers see of it: the gate that
  bounds what waits in it (``balanced_capacity``) and the arrivals that bring published
  chunks to it (one mailbox message per burst).
- ``_workers``: process members (``workers=N``), a `Pool` of worker processes.
- ``_ring``, ``_broadcast``: the topic's broadcast ring and its subscriber actors.
- ``_subscription``, ``_subscribers``: push and pull subscriptions, and the topic's registry
  of them.
"""
