"""The demo's orders: how they are made, validated and billed.

Orders travel as JSON bytes (`Message.data`) so the same payload is readable by the
billing workers, the audit subscriber and Spark. Amounts are integer cents: revenue
sums are exact, so the demo can compare Spark's totals with its own.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CURRENCIES",
    "Order",
    "bill",
    "expected_revenue",
    "invalid_reason",
    "make_orders",
]

# Tax rate per accepted currency (basis points): billing's per-order work uses it.
CURRENCIES = {"EUR": 2000, "USD": 800, "GBP": 2000}
# Rounds of SHA-256 that sign each invoice: the CPU-bound part of billing.
SIGNATURE_ROUNDS = 400
_INVALID_SHARE = 0.06


@dataclass(frozen=True, slots=True, kw_only=True)
class Order:
    """One order as the shop emits it."""

    order_id: int
    customer: str
    amount_cents: int
    currency: str
    items: int

    def encode(self) -> bytes:
        """The order as the JSON bytes published on topic ``orders``."""
        return json.dumps({
            "order_id": self.order_id, "customer": self.customer,
            "amount_cents": self.amount_cents, "currency": self.currency, "items": self.items,
        }).encode()


def make_orders(count: int, *, customers: int = 12, seed: int = 7) -> list[Order]:
    """``count`` reproducible orders; about 6% are invalid in one of three ways."""
    rng = random.Random(seed)
    orders = []
    for order_id in range(count):
        customer = f"customer-{rng.randrange(customers):02d}"
        amount, currency, items = rng.randrange(500, 50_000), rng.choice(list(CURRENCIES)), rng.randint(1, 9)
        if rng.random() < _INVALID_SHARE:
            flaw = rng.randrange(3)
            amount = -amount if flaw == 0 else amount
            currency = "XXX" if flaw == 1 else currency
            items = 0 if flaw == 2 else items
        orders.append(Order(order_id=order_id, customer=customer, amount_cents=amount,
                            currency=currency, items=items))
    return orders


def invalid_reason(order: dict[str, Any]) -> str | None:
    """Why billing refuses ``order`` (a decoded payload), or None when it is valid."""
    if order["amount_cents"] <= 0:
        return "invalid amount"
    if order["currency"] not in CURRENCIES:
        return "unknown currency"
    if order["items"] <= 0:
        return "empty cart"
    return None


def bill(delivery: Any) -> None:
    """Billing's handler (runs in a worker process): price, sign, then ack or nack.

    An invalid order is nacked with its reason; it lands in the dead letters.
    """
    order = json.loads(delivery.message.data)
    reason = invalid_reason(order)
    if reason is not None:
        delivery.nack(reason)
        return
    tax = order["amount_cents"] * CURRENCIES[order["currency"]] // 10_000
    invoice = f"{order['order_id']}:{order['customer']}:{order['amount_cents'] + tax}".encode()
    for _ in range(SIGNATURE_ROUNDS):
        invoice = hashlib.sha256(invoice).digest()
    delivery.ack()


def expected_revenue(orders: list[Order]) -> dict[str, int]:
    """Revenue in cents per customer over the valid orders (what Spark must compute)."""
    totals: Counter[str] = Counter()
    for order in orders:
        if invalid_reason({"amount_cents": order.amount_cents, "currency": order.currency,
                           "items": order.items}) is None:
            totals[order.customer] += order.amount_cents
    return dict(totals)
