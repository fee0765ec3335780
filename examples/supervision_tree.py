"""A worker app embeds its own supervision tree, and the tree heals itself.

A `rest_for_one` tree: a `Config` actor the others depend on, then two workers.
A worker that crashes on a bad job is restarted (its mail behind the bad job is
kept); the lifecycle events show what the supervisor did.
"""

from __future__ import annotations

import threading
from typing import Any

from actors import Actor, ActorSystem, Backoff, ChildSpec, SupervisorSpec


class Config(Actor):
    def on_receive(self, message: Any) -> Any:
        return {"rate": 1.2}


class Worker(Actor):
    def on_receive(self, message: Any) -> Any:
        if message < 0:
            raise ValueError(f"bad job {message}")
        return message * 2


def main() -> None:
    tree = SupervisorSpec(
        children=[
            ChildSpec(id="config", factory=Config),
            ChildSpec(id="worker-1", factory=Worker),
            ChildSpec(id="worker-2", factory=Worker),
        ],
        strategy="rest_for_one", max_restarts=3, within=5.0, backoff=Backoff(min=0.05, max=1.0),
    )
    restarted = threading.Event()
    with ActorSystem("worker-app") as system:
        system.events.subscribe(lambda e: print(f"event: {e.kind:9} {e.name}", e.error or ""))
        system.events.subscribe(lambda e: e.kind == "restarted" and restarted.set())
        system.supervise(tree, name="app")
        worker = system.lookup("worker-1")
        worker.tell(-1)  # crashes the worker: the supervisor restarts it (after its backoff)
        print("answer from the restarted worker:", worker.ask(21).result(timeout=5))  # 42
        restarted.wait(5)
        print("restarts:", {n: s.restarts for n, s in system.status().items() if s.restarts})


if __name__ == "__main__":
    main()
