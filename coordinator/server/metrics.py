"""Server-level Prometheus metrics, in a registry of the server's own (several servers can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.connections = Gauge(
            "kafka_group_coordinator_connections", "Open client connections.", registry=self.registry
        )
        self.requests = Counter(
            "kafka_group_coordinator_requests", "Requests answered, by API key.", ["api"], registry=self.registry
        )
        self.protocol_errors = Counter(
            "kafka_group_coordinator_protocol_errors",
            "Connections closed for malformed frames, headers or unknown API keys.",
            registry=self.registry,
        )
