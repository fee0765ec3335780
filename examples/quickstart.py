"""Quickstart: a topic with a balanced group and a broadcast subscriber, acked end to end.

Every message goes once to group "billing" (its members share the work) and once to
each broadcast subscriber. A message's outcome resolves when every destination acked.
"""

from __future__ import annotations

import threading

from runtime import Bus

print_lock = threading.Lock()  # handlers run on their own threads: one line at a time


def bill(delivery):
    with print_lock:
        print(f"billing {delivery.message} for {delivery.key}")
    delivery.ack()


def audit(delivery):
    with print_lock:
        print(f"audit saw {delivery.message}")
    delivery.ack()


if __name__ == "__main__":
    with Bus() as bus:
        orders = bus.create_topic("orders", ack_timeout=10.0)
        orders.subscribe(bill, group="billing")      # a balanced group member
        orders.subscribe(audit)                      # a broadcast subscriber
        report = orders.publish({"order": 1, "amount": 42}, key="customer-7")
        print("outcome:", report.outcome.result(timeout=5))  # Outcome(acked=True, nacks=())
        orders.join(timeout=5)
        print("stats:", orders.stats())
