"""Backpressure and throttle: a slow consumer slows the publisher down instead of piling up.

With `max_pending=8` a publish waits while 8 messages are unsettled (`timeout=` bounds
the wait: `WouldBlock`). With `throttle=0.5` publishes are delayed a little once less
than half of the slots are free, before the hard limit is reached.
"""

from __future__ import annotations

from runtime import Bus
from runtime.errors import WouldBlock

if __name__ == "__main__":
    with Bus() as bus:
        topic = bus.create_topic("events", max_pending=8, throttle=0.5)
        reader = topic.subscription(group="slow")  # a pull member that reads only when we say
        for n in range(8):
            topic.publish(n)
        try:
            topic.publish(8, timeout=0.2)
        except WouldBlock:
            print("publish 8 blocked: 8 messages pending, nobody acks")
        for _ in range(4):
            reader.receive(timeout=5).ack()  # free four slots
        topic.publish(8, timeout=5)
        print("after 4 acks publish 8 went through; pending =", topic.stats().pending)
        for _ in range(5):
            reader.receive(timeout=5).ack()
        topic.join(timeout=5)
        stats = topic.stats()
        print(f"delivered={stats.delivered}, publishes slowed by the throttle={stats.throttled}")
        assert stats.delivered == 9
        assert stats.throttled > 0
