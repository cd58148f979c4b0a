"""Upstream health of a server in front of a cluster, for /metrics (UpstreamCollector) and /readyz
(`upstream_status`): per upstream broker whether it answered last, the front's requests to it, their failures and
the last one's latency; and the groups whose commits the cluster refused for members of its own (split brain)."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .cluster import NodeStats


def upstream_status(front: Any, groups: Any) -> dict[str, Any]:
    cluster = front.cluster
    brokers = {}
    for node, (host, port) in sorted(cluster.nodes.items()):
        stats = cluster.stats.get(node, NodeStats())
        listener = front.listeners.get(node)
        brokers[str(node)] = {
            "address": f"{host}:{port}",
            "port_here": listener.bound_port if listener is not None else None,
            "reachable": stats.reachable,
            "requests": stats.requests,
            "errors": stats.errors,
            "last_latency_ms": round(stats.last_latency_s * 1000, 3),
            "last_error": stats.last_error or None,
        }
    return {
        "cluster_id": cluster.cluster_id,
        "reachable": any(b["reachable"] for b in brokers.values()),
        "brokers": brokers,
        "split_brain_groups": dict(sorted(groups.split_brain.items())) if groups is not None else {},
    }


class UpstreamCollector(Collector):
    def __init__(self, front: Any, groups: Any) -> None:
        self._front = front
        self._groups = groups

    def collect(self) -> Any:
        cluster = self._front.cluster
        up = GaugeMetricFamily(
            "kafka_group_coordinator_upstream_broker_up",
            "1 if the upstream broker answered the front's last request to it.",
            labels=["node"],
        )
        requests = CounterMetricFamily(
            "kafka_group_coordinator_upstream_requests",
            "Requests of the front's own to the upstream broker (Metadata, commits, state writes).",
            labels=["node"],
        )
        errors = CounterMetricFamily(
            "kafka_group_coordinator_upstream_errors",
            "Failed requests to the upstream broker and broken client connections to it.",
            labels=["node"],
        )
        latency = GaugeMetricFamily(
            "kafka_group_coordinator_upstream_latency_seconds",
            "Round trip of the last request of the front's own to the upstream broker.",
            labels=["node"],
        )
        for node in sorted(cluster.nodes):
            stats = cluster.stats.get(node, NodeStats())
            label = [str(node)]
            up.add_metric(label, 1 if stats.reachable else 0)
            requests.add_metric(label, stats.requests)
            errors.add_metric(label, stats.errors)
            latency.add_metric(label, stats.last_latency_s)
        yield up
        yield requests
        yield errors
        yield latency
        yield CounterMetricFamily(
            "kafka_group_coordinator_upstream_split_brain_commits",
            "Commits the upstream cluster refused because it has members of its own in the group (clients that "
            "bypass this server with the same group id).",
            value=sum(self._groups.split_brain.values()),
        )
