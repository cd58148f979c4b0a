"""The request metrics: kept as plain numbers, exposed exactly as prometheus_client's Counter and Histogram."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from coordinator.admin.status import request_stats
from coordinator.server.metrics import REQUEST_BUCKETS_S, ServerMetrics


class _Answer:
    def __init__(self, error_code: int) -> None:
        self.error_code = error_code


# (api key, version, error code, seconds): on a bucket bound, between bounds, above every bound, zero
OBSERVED = [
    (12, 4, 0, 0.0005),
    (12, 4, 0, 0.0001),
    (12, 4, 0, 0.0),
    (12, 4, 27, 0.003),
    (8, 9, 0, 0.7),
    (8, 9, 0, 400.0),
    (8, 9, 0, 300.0),
    (11, 9, 79, 0.001),
]
NAMES = {12: "Heartbeat", 8: "OffsetCommit", 11: "JoinGroup"}
ERRORS = {0: "NONE", 27: "REBALANCE_IN_PROGRESS", 79: "MEMBER_ID_REQUIRED"}


def test_request_metrics_are_exposed_as_prometheus_clients_counter_and_histogram_would_be():
    metrics = ServerMetrics()
    reference = CollectorRegistry()
    labels = ["api", "version", "error"]
    counter = Counter(
        "kafka_group_coordinator_requests",
        "Requests answered, by API, version and error code.",
        labels,
        registry=reference,
    )
    histogram = Histogram(
        "kafka_group_coordinator_request_duration_seconds",
        "Time from reading a request to writing its answer, by API, version and error code.",
        labels,
        buckets=REQUEST_BUCKETS_S,
        registry=reference,
    )
    for key, version, error, seconds in OBSERVED:
        metrics.observe_request(key, version, _Answer(error), seconds)
        counter.labels(NAMES[key], str(version), ERRORS[error]).inc()
        histogram.labels(NAMES[key], str(version), ERRORS[error]).observe(seconds)

    ours = generate_latest(metrics.registry).decode()
    for line in generate_latest(reference).decode().splitlines():
        assert line in ours

    stats = {s["api"]: s for s in request_stats(metrics)}
    assert stats["Heartbeat"]["count"] == 4 and stats["Heartbeat"]["errors"] == 1
    assert stats["OffsetCommit"]["count"] == 3 and stats["OffsetCommit"]["errors"] == 0
    assert stats["JoinGroup"]["errors"] == 1
