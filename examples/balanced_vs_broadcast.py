"""Balanced groups share the work; broadcast subscribers each see every message.

Two members of group "workers" split 20 messages between them; two broadcast
subscribers ("audit", "metrics") each receive all 20. A broadcast subscriber loses
nothing by default: one a whole ring (``broadcast_capacity``) behind holds publishers
until it reads (``broadcast_on_lag="block"``). A telemetry-like topic can choose
``"drop_oldest"``: a slow subscriber then skips entries, each dead-lettered ``lagged``.
"""

from __future__ import annotations

import threading
from collections import Counter

from runtime import Bus

seen: Counter[str] = Counter()
lock = threading.Lock()


def counter(name):
    def handle(delivery):
        with lock:
            seen[name] += 1
        delivery.ack()
    return handle


if __name__ == "__main__":
    with Bus() as bus:
        topic = bus.create_topic("jobs")
        topic.subscribe(counter("worker-a"), group="workers")
        topic.subscribe(counter("worker-b"), group="workers")
        topic.subscribe(counter("audit"))
        topic.subscribe(counter("metrics"))
        for n in range(20):
            topic.publish(n, key=f"k{n}")  # keyed: each key sticks to one member
        topic.join(timeout=5)
        shared = seen["worker-a"] + seen["worker-b"]
        print("balanced  :", seen["worker-a"], "+", seen["worker-b"], "=", shared)
        print("broadcast :", "audit", seen["audit"], "| metrics", seen["metrics"])
        print("delivered :", topic.stats().delivered)
        assert shared == 20
        assert seen["audit"] == seen["metrics"] == 20

        gauges = bus.create_topic("gauges", broadcast_capacity=4, broadcast_on_lag="drop_oldest")
        dashboard = gauges.subscription()  # reads only after the burst
        for n in range(10):
            gauges.publish(n)  # never waits: the oldest unread readings are skipped
        latest = [dashboard.receive(timeout=5) for _ in range(4)]
        for delivery in latest:
            delivery.ack()
        print("drop_oldest: dashboard read", [d.message for d in latest],
              "| lagged", gauges.stats().lagged)
        assert [d.message for d in latest] == [6, 7, 8, 9]
