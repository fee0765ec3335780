"""Prometheus metrics of a bus, scraped over loopback HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors import Actor
from runtime import Bus
from runtime.cli._metrics import MetricsServer


class Echo(Actor):
    def on_receive(self, message: object) -> object:
        return message


def scrape(server: MetricsServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    host, port = server.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }


def nack_odd(delivery: object) -> None:
    if int(delivery.message) % 2:  # type: ignore[attr-defined]
        delivery.nack("odd")  # type: ignore[attr-defined]
    else:
        delivery.ack()  # type: ignore[attr-defined]


def test_scrape_reports_topic_counters_pending_and_dead_letters_by_reason(bus: Bus) -> None:
    orders = bus.create_topic("orders")
    orders.subscribe(nack_odd, group="billing")
    for n in range(6):
        orders.publish(n)
    assert orders.join(timeout=10)
    bus.create_topic("idle").create_group("nobody")
    bus.publish("idle", "waiting")

    with MetricsServer(bus, host="127.0.0.1", port=0) as server:
        samples = scrape(server)

    assert samples[("actorbus_topic_published_total", (("topic", "orders"),))] == 6
    assert samples[("actorbus_topic_delivered_total", (("topic", "orders"),))] == 3
    assert samples[("actorbus_topic_nacked_total", (("topic", "orders"),))] == 3
    assert samples[("actorbus_topic_dead_letters", (("reason", "nack"), ("topic", "orders")))] == 3
    assert samples[("actorbus_topic_pending", (("topic", "orders"),))] == 0
    assert samples[("actorbus_topic_pending", (("topic", "idle"),))] == 1


def test_scrape_reports_process_actors_rss_cpu_and_restarts(bus: Bus) -> None:
    bus.system.spawn(Echo, name="echo-process", process=True)
    assert bus.system.lookup("echo-process").ask("ping").result(timeout=10) == "ping"

    with MetricsServer(bus, port=0) as server:
        samples = scrape(server)

    pid = str(bus.system.status()["echo-process"].pid)
    labels = (("actor", "echo-process"), ("kind", "process"))
    assert samples[("actorbus_actor_alive", labels)] == 1
    assert samples[("actorbus_actor_restarts_total", labels)] == 0
    assert samples[("actorbus_process_resident_memory_bytes", (*labels, ("pid", pid)))] > 1_000_000
    assert ("actorbus_process_cpu_percent", (*labels, ("pid", pid))) in samples
    assert samples[("process_resident_memory_bytes", ())] > 0  # the broker's own process


def test_close_stops_serving_and_is_idempotent(bus: Bus) -> None:
    server = MetricsServer(bus, port=0)
    host, port = server.address

    server.close()
    server.close()

    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2)
