"""Prometheus metrics of a bus: topic counters, dead letters by reason, actor processes.

Collected on every scrape from ``bus.stats()``, the dead-letter queues and
``bus.system.status()``, into a registry of our own (never the client's global one).
Exposed over HTTP by `MetricsServer` (``actorbus serve --metrics-port``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["BusCollector", "MetricsServer", "metrics_registry"]

# TopicStats counters exported as ``actorbus_topic_<name>_total``.
_COUNTERS = {
    "published": "publishes accepted by the topic",
    "delivered": "messages every destination acked",
    "nacked": "failed settlements other than deadline expiries",
    "timed_out": "delivery attempts whose ack deadline expired",
    "dead_lettered": "dead letters written",
    "dropped": "group deliveries dropped on a full group",
    "lagged": "broadcast entries skipped by a subscriber a whole ring behind",
    "redelivered": "deliveries sent back to their group",
    "throttled": "publishes the throttle delayed",
}


class BusCollector(Collector):
    """Reads a bus's figures at scrape time.

    Args:
        bus: a `Bus` (its ``stats()``, ``topic(name).dead_letters`` and ``system``).
    """

    def __init__(self, bus: Any) -> None:
        self._bus = bus

    def collect(self) -> Iterator[Metric]:
        """Every metric family, freshly read."""
        yield from self._topics()
        yield from self._processes()

    def _topics(self) -> Iterator[Metric]:
        stats = self._bus.stats()
        counters = {name: CounterMetricFamily(f"actorbus_topic_{name}", f"Topic: {text}.", labels=["topic"])
                    for name, text in _COUNTERS.items()}
        pending = GaugeMetricFamily(
            "actorbus_topic_pending", "Messages not yet settled by every destination (the topic's lag).",
            labels=["topic"])
        letters = GaugeMetricFamily(
            "actorbus_topic_dead_letters", "Dead letters held, by reason.", labels=["topic", "reason"])
        for topic, snapshot in stats.items():
            for name, family in counters.items():
                family.add_metric([topic], getattr(snapshot, name))
            pending.add_metric([topic], snapshot.pending)
            for reason, count in sorted(self._reasons(topic).items()):
                letters.add_metric([topic, reason], count)
        yield from counters.values()
        yield pending
        yield letters

    def _reasons(self, topic: str) -> Counter[str]:
        try:
            return Counter(letter.reason for letter in self._bus.topic(topic).dead_letters)
        except LookupError:  # removed between stats() and now
            return Counter()

    def _processes(self) -> Iterator[Metric]:
        labels = ["actor", "kind"]
        alive = GaugeMetricFamily("actorbus_actor_alive", "1 while the actor runs.", labels=labels)
        restarts = CounterMetricFamily("actorbus_actor_restarts", "Restarts of the actor.", labels=labels)
        mailbox = GaugeMetricFamily(
            "actorbus_actor_mailbox", "Messages waiting for the actor.", labels=labels)
        rss = GaugeMetricFamily(
            "actorbus_process_resident_memory_bytes", "RSS of a process actor.", labels=[*labels, "pid"])
        cpu = GaugeMetricFamily(
            "actorbus_process_cpu_percent", "CPU use of a process actor since the last scrape.",
            labels=[*labels, "pid"])
        for name, status in sorted(self._bus.system.status().items()):
            key = [name, status.kind]
            alive.add_metric(key, 1.0 if status.alive else 0.0)
            restarts.add_metric(key, status.restarts)
            mailbox.add_metric(key, status.mailbox)
            if status.pid is not None:
                rss.add_metric([*key, str(status.pid)], status.rss or 0)
                cpu.add_metric([*key, str(status.pid)], status.cpu_percent or 0.0)
        yield from (alive, restarts, mailbox, rss, cpu)


def metrics_registry(bus: Any) -> CollectorRegistry:
    """A registry with the bus's metrics and this process's own (``process_*``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BusCollector(bus))
    ProcessCollector(registry=registry)
    return registry


class MetricsServer:
    """Serves ``/metrics`` for ``bus`` over HTTP until `close()`.

    Args:
        bus: the bus to report.
        host: the interface to bind (loopback by default).
        port: the TCP port; 0 picks a free one (see `address`).

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(self, bus: Any, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=metrics_registry(bus))
        self._thread.name = "actorbus-metrics"
        self._lock = threading.Lock()
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        """Stop serving; blocks until the server thread ended. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
