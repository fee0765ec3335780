"""A typed topic: wrong types are refused at publish, invalid orders are nacked into dead letters.

`message_type` makes `publish` check `isinstance` before anything is delivered. A handler
that nacks (or raises) sends the message to the topic's dead letters with a reason;
`replay()` republishes them once the cause is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime import Bus
from runtime.errors import MessageTypeError


@dataclass(frozen=True)
class Order:
    order_id: int
    amount: int


def bill(delivery):
    if delivery.message.amount <= 0:
        delivery.nack(f"amount must be positive, got {delivery.message.amount}")
        return
    if delivery.message.amount > 1000:
        raise ValueError("needs manual approval")  # a raise nacks too, with reason "error"
    delivery.ack()


if __name__ == "__main__":
    with Bus() as bus:
        orders = bus.create_topic("orders", message_type=Order)
        orders.subscribe(bill, group="billing")
        try:
            orders.publish({"order_id": 1, "amount": 5})
        except MessageTypeError as exc:
            print("refused:", exc)
        for order_id, amount in enumerate([30, -5, 20, 5000, 0]):
            orders.publish(Order(order_id, amount))
        orders.join(timeout=5)
        for letter in orders.dead_letters:
            order = letter.message.order_id
            print(f"dead letter: order {order} reason={letter.reason} error={letter.error!r}")
        print("stats:", orders.stats())
        orders.subscribe(lambda d: d.ack(), group="manual-review")  # fixed: a group that takes all
        print("replayed:", orders.dead_letters.replay())
        orders.join(timeout=5)
        print("dead letters after replay:", len(orders.dead_letters), "(billing still refuses them)")
        assert len(orders.dead_letters) == 3  # billing still refuses them; review acked them
