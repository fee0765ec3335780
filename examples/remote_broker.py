"""A remote broker client: another process publishes and pulls through `runtime.connect`.

`bus.serve()` opens the broker endpoint (loopback, HMAC challenge with a shared key);
`runtime.connect()` returns a `RemoteBus` with the same calls as a local one. Here the
client runs in a child process; run `actorbus serve` to get a standalone broker.
"""

from __future__ import annotations

import multiprocessing
import secrets

import runtime
from runtime import Bus


def client(address, authkey):
    with runtime.connect(address, authkey=authkey) as remote:
        orders = remote.topic("orders")
        for n in range(5):
            orders.publish(f"order {n}", key="customer-1")
        inbox = remote.topic("receipts").subscription(group="client")
        for _ in range(5):
            delivery = inbox.receive(timeout=10)
            print("client got:", delivery.message)
            delivery.ack()
        print("client sees topics:", remote.topics())


def receipts(bus):
    def receipt(delivery):
        bus.publish("receipts", f"receipt for {delivery.message}")
        delivery.ack()
    return receipt


if __name__ == "__main__":
    authkey = secrets.token_bytes(16)
    with Bus() as bus:
        bus.create_topic("receipts").create_group("client")
        bus.create_topic("orders").subscribe(receipts(bus), group="billing")
        server = bus.serve(("127.0.0.1", 0), authkey=authkey)
        print("serving on", server.address)
        child = multiprocessing.get_context("spawn").Process(target=client, args=(server.address, authkey))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        bus.topic("receipts").join(timeout=10)
        print("orders stats:", bus.topic("orders").stats())
