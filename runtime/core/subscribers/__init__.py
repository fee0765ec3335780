"""Who receives a topic's messages.

- ``_group``, ``_member``, ``_gate``: a balanced group actor, its members and the gate that
  bounds what waits in it (``balanced_capacity``); ``_arrivals``: how published chunks
  reach the group actor (one mailbox message per burst); ``_key_routing``: how it queues
  them, by key among its members.
- ``_workers``: process members (``workers=N``), a `Pool` of worker processes.
- ``_ring``, ``_broadcast``: the topic's broadcast ring and its subscriber actors.
- ``_subscription``, ``_subscribers``: push and pull subscriptions, and the topic's registry
  of them.
"""
