"""A batching Publisher with ordering keys: few mailbox messages, per-customer order kept.

The Publisher groups messages into batches (100 messages, 1 MiB or 10 ms, whichever
comes first). With `message_ordering=True` each ordering key gets its own batches,
sent strictly in order, so one customer's events arrive in the order published.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from runtime import BatchSettings, Bus

received: dict[str, list[int]] = defaultdict(list)
lock = threading.Lock()


def record(delivery):
    with lock:
        received[delivery.key].append(int(delivery.message.data))
    delivery.ack()


if __name__ == "__main__":
    with Bus() as bus:
        topic = bus.create_topic("events")
        topic.subscribe(record, group="consumers")
        topic.subscribe(record, group="consumers")  # two members; a key sticks to one of them
        publisher = topic.publisher(
            batching=BatchSettings(max_messages=100, max_bytes=1024 * 1024, max_latency=0.010),
            message_ordering=True)
        futures = [publisher.publish(str(n).encode(), ordering_key=f"customer-{n % 3}")
                   for n in range(600)]
        publisher.flush(timeout=10)
        print("first ids:", [f.result() for f in futures[:3]])
        topic.join(timeout=10)
        publisher.close()
        for key in sorted(received):
            in_order = received[key] == sorted(received[key])
            print(f"{key}: {len(received[key])} messages, in publish order: {in_order}")
            assert in_order
