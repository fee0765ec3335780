"""Publisher flow control: bound what is accepted but not yet confirmed by the topic.

`limit_exceeded="error"` fails a publish at once when the limit is reached
(`FlowControlError`, code 8); `"block"` waits for room (first sending what is batched,
so it always progresses); `"ignore"` never blocks.
"""

from __future__ import annotations

from runtime import BatchSettings, Bus, FlowControl
from runtime.errors import FlowControlError

if __name__ == "__main__":
    with Bus() as bus:
        topic = bus.create_topic("uploads")
        topic.subscribe(lambda d: d.ack(), group="store")
        lazy = BatchSettings(max_messages=1000, max_bytes=10 * 1024 * 1024, max_latency=60.0)
        strict = topic.publisher(batching=lazy, flow_control=FlowControl(
            max_outstanding_messages=5, limit_exceeded="error"))
        for n in range(5):
            strict.publish(b"chunk %d" % n)  # held in a batch: 5 outstanding
        try:
            strict.publish(b"one too many")
        except FlowControlError as exc:
            print(f"refused at once: {exc} (code {exc.code})")
        strict.close(timeout=10)

        patient = topic.publisher(batching=lazy, flow_control=FlowControl(
            max_outstanding_messages=5, limit_exceeded="block"))
        futures = [patient.publish(b"chunk %d" % n) for n in range(50)]  # waits whenever 5 are out
        patient.flush(timeout=10)  # the last batch would otherwise wait for max_latency
        print("block mode accepted all:", len([f.result(timeout=10) for f in futures]))
        patient.close(timeout=10)
        topic.join(timeout=10)
        print("delivered:", topic.stats().delivered)
        assert topic.stats().delivered == 55
