"""Server-level Prometheus metrics, in a registry of the server's own (several servers can share a process).

The request metrics are labelled with the API's name (as Kafka's `RequestMetrics` name them: JoinGroup,
OffsetCommit...), the request version and the error code of the answer (its top-level error code, or else the
first error found in its per-group / per-topic / per-partition entries; NONE when there is none). Latency is
measured from the moment the request was read off the socket to the moment its answer was written, so it
includes the time a JoinGroup waits at the join barrier and the time a commit waits for the fsync.

The group, coordinator and storage families are built at scrape time by coordinator.observability's collector,
registered here by the admin listener (`add_collector`).
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Iterable
from typing import Any

from kio.schema.offset_commit.v9.response import OffsetCommitResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from protocol.api_keys import api_name
from protocol.build import entity_array_fields
from protocol.errors import ErrorCode

# `_created` series double every counter and histogram for little use; they are off for the whole process.
disable_created_metrics()

REQUEST_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
STORAGE_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
COMPACTION_BUCKETS_S = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)

_SCAN_LIMIT = 256  # entries looked at when searching an answer for its first error


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.connections = Gauge(
            "kafka_group_coordinator_connections", "Open client connections.", registry=self.registry
        )
        self._request_series = _RequestSeries(REQUEST_BUCKETS_S)
        self.requests = _RequestCount(self._request_series)
        self.request_duration = _RequestDuration(self._request_series)
        self.registry.register(self.requests)
        self.registry.register(self.request_duration)
        self.protocol_errors = Counter(
            "kafka_group_coordinator_protocol_errors",
            "Connections closed for malformed frames, headers or unknown API keys.",
            registry=self.registry,
        )
        self.log_append_duration = Histogram(
            "kafka_group_coordinator_log_append_duration_seconds",
            "Time from appending records to the group log to their being durable (linger, write and fsync).",
            buckets=STORAGE_BUCKETS_S,
            registry=self.registry,
        )
        self.log_compaction_duration = Histogram(
            "kafka_group_coordinator_log_compaction_duration_seconds",
            "Duration of group log compactions.",
            buckets=COMPACTION_BUCKETS_S,
            registry=self.registry,
        )
        self._collectors: list[Collector] = []

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)
        self._collectors.append(collector)

    def remove_collectors(self) -> None:
        for collector in self._collectors:
            self.registry.unregister(collector)
        self._collectors.clear()

    def observe_request(self, api_key: int, api_version: int, response: Any, seconds: float) -> None:
        self._request_series.observe((api_key, api_version, response_error(response)), seconds)


class _RequestSeries:
    """The request counter and latency histogram of every (API, version, error) as plain numbers, turned into
    Prometheus families when scraped. Only the event loop writes them, and the scrape runs on it too, so they
    need none of the three locks and the walk of the buckets that prometheus_client's Counter.inc and
    Histogram.observe cost per request (5% of a heartbeat's CPU in a profile)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        # per series: answers per bucket (index i: at most bounds[i], not above bounds[i-1]; the last: above
        # every bound), and their seconds in all
        self.by_key: dict[tuple[int, int, int], list[int]] = {}
        self.sums: dict[tuple[int, int, int], float] = {}

    def observe(self, key: tuple[int, int, int], seconds: float) -> None:
        counts = self.by_key.get(key)
        if counts is None:
            counts = self.by_key[key] = [0] * (len(self.bounds) + 1)
            self.sums[key] = 0.0
        counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sums[key] += seconds

    def labelled(self) -> list[tuple[list[str], list[int], float]]:
        return [
            ([api_name(key[0]), str(key[1]), error_name(key[2])], counts, self.sums[key])
            for key, counts in self.by_key.items()
        ]


_REQUEST_LABELS = ["api", "version", "error"]


class _RequestCount(Collector):
    def __init__(self, series: _RequestSeries) -> None:
        self._series = series

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "kafka_group_coordinator_requests",
            "Requests answered, by API, version and error code.",
            labels=_REQUEST_LABELS,
        )
        for labels, counts, _ in self._series.labelled():
            family.add_metric(labels, float(sum(counts)))
        yield family


class _RequestDuration(Collector):
    def __init__(self, series: _RequestSeries) -> None:
        self._series = series

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(
            "kafka_group_coordinator_request_duration_seconds",
            "Time from reading a request to writing its answer, by API, version and error code.",
            labels=_REQUEST_LABELS,
        )
        bounds = [floatToGoString(b) for b in self._series.bounds] + ["+Inf"]
        for labels, counts, seconds in self._series.labelled():
            cumulative = list(itertools.accumulate(counts))
            family.add_metric(
                labels, [(b, float(n)) for b, n in zip(bounds, cumulative, strict=True)], seconds
            )
        yield family


@functools.cache
def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def response_error(response: Any) -> int:
    """The answer's error code: the top-level one if set, else the first non-zero one in its entries."""
    known = _ERRORS.get(id(response))
    if known is not None and known[0] is response:
        return known[1]
    budget = [_SCAN_LIMIT]
    found = _error_in(response, 3, budget)
    code = 0 if found is None else found
    if type(response) is OffsetCommitResponse and 0 < _SCAN_LIMIT - budget[0] <= _REMEMBERED_ENTRIES:
        # An answer made once and given again (a consumer's commit of the same few partitions, see
        # coordinator.offsets.manager): its entries are walked once. Only those: an immutable entity, and small (the
        # entry holds the answer, so no other object has its id meanwhile, and it is kept alive that long).
        if len(_ERRORS) >= _REMEMBERED_ANSWERS:
            _ERRORS.clear()
        _ERRORS[id(response)] = (response, code)
    return code


_ERRORS: dict[int, tuple[Any, int]] = {}
_REMEMBERED_ANSWERS = 1024
_REMEMBERED_ENTRIES = 32


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _error_in(obj: Any, depth: int, budget: list[int]) -> int | None:
    code = _get(obj, "error_code")
    if code:
        return int(code)
    if depth == 0:
        return None
    if isinstance(obj, dict):
        fields: Any = obj.values()
    elif hasattr(obj, "__dataclass_fields__"):
        kind: Any = type(obj)
        names = entity_array_fields(kind)
        if not names:
            return None  # no entries to look into (a Heartbeat answer): the common case, kept cheap
        fields = (getattr(obj, name, None) for name in names)
    else:
        return None
    for value in fields:
        if isinstance(value, (list, tuple)):
            for item in value:
                budget[0] -= 1
                if budget[0] < 0:
                    return None
                if isinstance(item, (dict,)) or hasattr(item, "__dataclass_fields__"):
                    found = _error_in(item, depth - 1, budget)
                    if found:
                        return found
    return None


class ShardCollector(Collector):
    """The group shards' health, read at scrape time (coordinator.server.shards.Shards)."""

    STATES = ("loading", "active", "stalled", "failed", "fenced", "standby")

    def __init__(self, shards: Any) -> None:
        self._shards = shards

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        shards = GaugeMetricFamily(
            "kafka_group_coordinator_group_shards",
            "Group shards this server owns, by state (stalled: its log fails or times out; "
            "failed: given up and reloading; fenced: claimed by another server on the state topic; standby: "
            "another server's, whose state this one follows as its hot standby).",
            labels=["state"],
        )
        counts = dict.fromkeys(self.STATES, 0)
        for shard in list(self._shards.by_index.values()):
            counts[shard.state.value] = counts.get(shard.state.value, 0) + 1
        counts["standby"] = len(getattr(self._shards, "standby", ()))
        for state, count in counts.items():
            shards.add_metric([state], count)
        yield shards
        yield CounterMetricFamily(
            "kafka_group_coordinator_group_shard_failures",
            "Times a group shard was marked failed and reloaded from its log.",
            value=self._shards.failures,
        )
