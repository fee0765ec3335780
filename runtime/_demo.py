"""``actorbus demo``: a supervised process pool doing real work, end to end."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from actors import Actor, ActorSystem

__all__ = ["run_demo"]


class Biller(Actor):
    """Prices an order: a deliberately CPU-bound hash chain stands in for real work."""

    def on_receive(self, message: Any) -> Any:
        order_id, amount = message
        if amount < 0:
            raise ValueError(f"order {order_id}: negative amount {amount}")
        digest = str(order_id).encode()
        for _ in range(2000):
            digest = hashlib.sha256(digest).digest()
        return order_id, round(amount * 1.2, 2), os.getpid()


def run_demo(*, messages: int = 2000, workers: int | None = None) -> int:
    """Fan ``messages`` orders out over a pool of worker processes; print a summary."""
    workers = workers or os.cpu_count() or 1
    started = time.perf_counter()
    with ActorSystem("demo") as system:
        pool = system.pool(Biller, size=workers, name="billing")
        futures = [pool.ask((i, -1 if i % 97 == 0 else i % 50), timeout=60) for i in range(messages)]
        done = [f.exception(60) is None for f in futures]
        pids = {f.result()[2] for f, ok in zip(futures, done, strict=True) if ok}
    elapsed = time.perf_counter() - started
    billed, rejected = sum(done), len(done) - sum(done)
    print(f"orders: {messages}  billed: {billed}  rejected: {rejected}  "
          f"workers used: {len(pids)}  {messages / elapsed:,.0f} orders/s")
    return 0 if billed + rejected == messages and rejected == len(range(0, messages, 97)) else 1
