"""A typed topic: wrong types are refused at publish, failed orders wait in dead letters for a replay.

`message_type` makes `publish` check `isinstance` before anything is delivered. A handler
that nacks (or raises: logged at WARNING with its traceback) sends the message to the
topic's dead letters with a reason. Once the cause is fixed, `replay()` sends each letter
back only to the destination that failed it, under the same message id: the audit
subscriber, which acked every order, sees none of them twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runtime import Bus
from runtime.errors import MessageTypeError


@dataclass(frozen=True)
class Order:
    order_id: int
    amount: int


approval_limit = 1000
audited: list[int] = []


def bill(delivery):
    if delivery.message.amount <= 0:
        delivery.nack(f"amount must be positive, got {delivery.message.amount}")
        return
    if delivery.message.amount > approval_limit:
        raise ValueError("needs manual approval")  # a raise nacks too, with reason "error"
    delivery.ack()


def audit(delivery):
    audited.append(delivery.message.order_id)
    delivery.ack()


if __name__ == "__main__":
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    with Bus() as bus:
        orders = bus.create_topic("orders", message_type=Order)
        orders.subscribe(bill, group="billing")
        orders.subscribe(audit)
        try:
            orders.publish({"order_id": 1, "amount": 5})
        except MessageTypeError as exc:
            print("refused:", exc)
        for order_id, amount in enumerate([30, -5, 20, 5000, 0]):
            orders.publish(Order(order_id, amount))
        orders.join(timeout=5)
        for letter in orders.dead_letters:
            print(f"dead letter: order {letter.message.order_id} reason={letter.reason} "
                  f"error={letter.error!r} exception={letter.exception}")
        print("stats:", orders.stats())

        approval_limit = 10_000  # the fix: the large order is approved now
        print("replayed:", orders.dead_letters.replay())
        orders.join(timeout=5)
        left = sorted(letter.message.order_id for letter in orders.dead_letters)
        print("dead letters after replay:", len(left), f"(orders {left}: amounts still <= 0)")
        print("audited:", sorted(audited), "(each order once)")
        assert left == [1, 4]
        assert sorted(audited) == [0, 1, 2, 3, 4]
