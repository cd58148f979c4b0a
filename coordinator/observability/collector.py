"""The Prometheus collector for groups, the coordinator and its log, built fresh at every scrape.

Families and where their names come from:

* kafka_exporter (danielqsj/kafka_exporter, Grafana dashboard 7589): `kafka_consumergroup_current_offset`,
  `_current_offset_sum`, `_lag`, `_lag_sum`, `_members`, labels `consumergroup`, `topic`, `partition`. Every group
  with commits has lag, Empty and simple (generation -1) groups included; partitions without a commit have no
  series (no -1 sentinel) and are counted in `kafka_consumergroup_uncommitted_partitions`.
* kafka-lag-exporter (seglo/kafka-lag-exporter): `kafka_consumergroup_group_lag_seconds`,
  `_group_max_lag_seconds` and `kafka_partition_latest_offset`, with that exporter's label names.
* Kafka's group-coordinator JMX metrics under the usual jmx_exporter names (`kafka_server_$type_$name`):
  `kafka_server_group_coordinator_metrics_group_count{protocol}`, `..._classic_group_count{state}`,
  `..._offset_count`, `..._offset_commit_count`, `..._offset_expiration_count`,
  `..._group_completed_rebalance_count`, `..._partition_load_time_max`/`_avg` (milliseconds, as Kafka's).
* Ours: `kafka_consumergroup_state`, `_generation`, `_rebalances_total{reason}`, `_rebalance_duration_seconds`,
  `_member_expirations_total{cause}`, `_fenced_total{error}`, `_paused_partitions`,
  `_last_commit_timestamp_seconds`, and the group log's `kafka_group_coordinator_log_*`.

The compatibility names that end in `_sum` or `_count` are exposed untyped, as jmx_exporter exposes JMX values:
Prometheus reserves those suffixes for histograms and summaries, and its linter only applies that rule to typed
metrics, so the names stay exactly what existing dashboards query. Cardinality controls (MetricsFilter) apply to
every per-group and per-topic family; with per-partition series off only per-topic and per-group series remain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

from coordinator.consumer.group import ConsumerGroupState
from coordinator.group.state import ClassicGroupState

from .lag import MetricsFilter
from .view import CoordinatorView

GROUP_STATES = [str(s) for s in ClassicGroupState if s is not ClassicGroupState.DEAD]
CONSUMER_GROUP_STATES = [str(s) for s in ConsumerGroupState if s is not ConsumerGroupState.DEAD]
JMX = "kafka_server_group_coordinator_metrics_"


class CoordinatorCollector(Collector):
    def __init__(
        self,
        view: CoordinatorView,
        metrics_filter: MetricsFilter,
        *,
        cluster_name: str = "",
        log: Callable[[], Any] | None = None,
        load_time_ms: Callable[[], float | None] | None = None,
    ) -> None:
        """`log()` returns the group log (anything with `stats()`) or None; `load_time_ms()` how long loading
        took, or None while it has not finished."""
        self.view = view
        self.filter = metrics_filter
        self.cluster_name = cluster_name
        self._log = log or (lambda: None)
        self._load_time_ms = load_time_ms or (lambda: None)

    def describe(self) -> list[Metric]:
        return []  # names vary with the data; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._groups()
        yield from self._coordinator()
        yield from self._storage()

    # -- groups ----------------------------------------------------------------------------------------------

    def _groups(self) -> Iterator[Metric]:
        f = self.filter
        per_partition = f.per_partition
        group_labels = ["consumergroup"]
        tp = ["consumergroup", "topic"]
        tpp = ["consumergroup", "topic", "partition"]
        current_offset = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset of a partition.", labels=tpp
        )
        current_offset_sum = UnknownMetricFamily(
            "kafka_consumergroup_current_offset_sum",
            "Sum of the committed offsets of a topic's partitions.",
            labels=tp,
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Log-end offset minus committed offset (partitions with a commit only).",
            labels=tpp,
        )
        lag_sum = UnknownMetricFamily(
            "kafka_consumergroup_lag_sum", "Lag of a topic's committed partitions, summed.", labels=tp
        )
        uncommitted = GaugeMetricFamily(
            "kafka_consumergroup_uncommitted_partitions",
            "Partitions the group consumes (subscribed or committed topics) without a committed offset.",
            labels=tp,
        )
        last_commit = GaugeMetricFamily(
            "kafka_consumergroup_last_commit_timestamp_seconds",
            "When the committed offset was committed.",
            labels=tpp,
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group.", labels=group_labels
        )
        state = GaugeMetricFamily(
            "kafka_consumergroup_state",
            "1 for the state the group is in, 0 for the others.",
            labels=["consumergroup", "state", "protocol"],
        )
        generation = GaugeMetricFamily(
            "kafka_consumergroup_generation", "The group's generation id.", labels=group_labels
        )
        paused = GaugeMetricFamily(
            "kafka_consumergroup_paused_partitions",
            "Partitions of the group's assignments withheld because they are paused on the coordinator.",
            labels=group_labels,
        )
        lag_seconds = GaugeMetricFamily(
            "kafka_consumergroup_group_lag_seconds",
            "Estimated age of the oldest record not yet consumed, from the history of log-end offsets.",
            labels=["cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id"],
        )
        max_lag_seconds = GaugeMetricFamily(
            "kafka_consumergroup_group_max_lag_seconds",
            "The largest lag in seconds of the group's partitions.",
            labels=["cluster_name", "group", "is_simple_consumer"],
        )
        latest_offset = GaugeMetricFamily(
            "kafka_partition_latest_offset",
            "Log-end offset (high watermark) of a partition some group consumes.",
            labels=["cluster_name", "topic", "partition"],
        )
        rebalances = CounterMetricFamily(
            "kafka_consumergroup_rebalances",
            "Rebalances started, by reason category.",
            labels=["consumergroup", "reason"],
        )
        durations = HistogramMetricFamily(
            "kafka_consumergroup_rebalance_duration_seconds",
            "Time from PreparingRebalance to Stable (or to Empty when everyone left).",
            labels=group_labels,
        )
        expirations = CounterMetricFamily(
            "kafka_consumergroup_member_expirations",
            "Members removed because a timer ran out, by cause.",
            labels=["consumergroup", "cause"],
        )
        fenced = CounterMetricFamily(
            "kafka_consumergroup_fenced",
            "Requests answered with a fencing error, by error.",
            labels=["consumergroup", "error"],
        )

        view = self.view
        history = view.history
        now = view.monotonic()
        latest_seen: set[tuple[str, int]] = set()
        for group in sorted(view.groups(), key=lambda g: g.group_id):
            gid = group.group_id
            if not f.group(gid):
                continue
            members.add_metric([gid], group.num_members())
            generation.add_metric([gid], group.generation_id)
            paused.add_metric([gid], view.paused_partitions(group))
            current = str(group.state)
            kind = getattr(group, "group_type", "classic")
            for name in CONSUMER_GROUP_STATES if kind == "consumer" else GROUP_STATES:
                state.add_metric([gid, name, kind], 1 if name == current else 0)
            for reason, count in sorted(history.rebalances(gid).items()):
                rebalances.add_metric([gid, reason], count)
            for cause, count in sorted(history.expirations(gid).items()):
                expirations.add_metric([gid, cause], count)
            for error, count in sorted(history.fenced(gid).items()):
                fenced.add_metric([gid, error], count)
            histogram = history.durations(gid)
            if histogram is not None:
                durations.add_metric([gid], histogram.buckets(), histogram.total)

            group_lag = view.lag(group)
            owners = view.owners(group) if per_partition else {}
            max_seconds: float | None = None
            for topic in group_lag.topics():
                if not f.topic(topic):
                    continue
                parts = [p for p in group_lag.partitions if p.topic == topic]
                if parts:
                    current_offset_sum.add_metric([gid, topic], sum(p.committed_offset for p in parts))
                if any(p.lag is not None for p in parts):
                    lag_sum.add_metric([gid, topic], sum(p.lag for p in parts if p.lag is not None))
                if topic in group_lag.uncommitted:
                    uncommitted.add_metric([gid, topic], group_lag.uncommitted[topic])
                for p in parts:
                    seconds = view.lag_seconds(topic, p.partition, p.committed_offset, p.log_end_offset, now)
                    if seconds is not None:
                        max_seconds = seconds if max_seconds is None else max(max_seconds, seconds)
                    if not per_partition:
                        continue
                    labels = [gid, topic, str(p.partition)]
                    current_offset.add_metric(labels, p.committed_offset)
                    if p.commit_timestamp_ms >= 0:
                        last_commit.add_metric(labels, p.commit_timestamp_ms / 1000)
                    if p.lag is not None:
                        lag.add_metric(labels, p.lag)
                    if p.log_end_offset is not None and (topic, p.partition) not in latest_seen:
                        latest_seen.add((topic, p.partition))
                        latest_offset.add_metric(
                            [self.cluster_name, topic, str(p.partition)], p.log_end_offset
                        )
                    if seconds is not None:
                        owner = owners.get((topic, p.partition))
                        lag_seconds.add_metric(
                            [
                                self.cluster_name,
                                gid,
                                topic,
                                str(p.partition),
                                owner.client_host if owner else "",
                                owner.member_id if owner else "",
                                owner.client_id if owner else "",
                            ],
                            seconds,
                        )
            if max_seconds is not None:
                simple = "true" if group.protocol_type is None else "false"
                max_lag_seconds.add_metric([self.cluster_name, gid, simple], max_seconds)

        yield from (
            current_offset,
            current_offset_sum,
            lag,
            lag_sum,
            uncommitted,
            last_commit,
            members,
            state,
            generation,
            paused,
            lag_seconds,
            max_lag_seconds,
            latest_offset,
            rebalances,
            durations,
            expirations,
            fenced,
        )

    # -- the coordinator (Kafka's GroupCoordinatorMetrics) ---------------------------------------------------

    def _coordinator(self) -> Iterator[Metric]:
        view = self.view
        history = view.history
        everything = list(view.groups())
        groups = [g for g in everything if getattr(g, "group_type", "classic") == "classic"]
        consumer_groups = [g for g in everything if getattr(g, "group_type", "classic") == "consumer"]
        group_count = UnknownMetricFamily(
            JMX + "group_count", "Groups of the coordinator, by rebalance protocol.", labels=["protocol"]
        )
        group_count.add_metric(["classic"], len(groups))
        group_count.add_metric(["consumer"], len(consumer_groups))
        yield group_count
        by_state = UnknownMetricFamily(
            JMX + "classic_group_count", "Classic groups by state.", labels=["state"]
        )
        for name in GROUP_STATES + ["Dead"]:
            by_state.add_metric([name], sum(1 for g in groups if str(g.state) == name))
        yield by_state
        consumer_by_state = UnknownMetricFamily(
            JMX + "consumer_group_count", "Consumer groups (KIP-848) by state.", labels=["state"]
        )
        for name in CONSUMER_GROUP_STATES:
            consumer_by_state.add_metric([name], sum(1 for g in consumer_groups if str(g.state) == name))
        yield consumer_by_state
        yield UnknownMetricFamily(
            JMX + "offset_count", "Committed offsets held.", value=view.shards.offsets.store.num_offsets()
        )
        yield UnknownMetricFamily(
            JMX + "offset_commit_count", "Offsets committed since the start.", value=history.offsets_committed
        )
        yield UnknownMetricFamily(
            JMX + "offset_expiration_count",
            "Offsets expired by retention since the start.",
            value=history.offsets_expired,
        )
        yield UnknownMetricFamily(
            JMX + "offset_deletion_count",
            "Offsets deleted by OffsetDelete since the start.",
            value=history.offsets_deleted,
        )
        yield UnknownMetricFamily(
            JMX + "group_completed_rebalance_count",
            "Rebalances completed (the leader's assignment made a group Stable) since the start.",
            value=history.completed_rebalances,
        )
        load_ms = self._load_time_ms()
        if load_ms is not None:
            yield UnknownMetricFamily(
                JMX + "partition_load_time_max",
                "Longest time loading a shard of the group log took, in milliseconds.",
                value=load_ms,
            )
            yield UnknownMetricFamily(
                JMX + "partition_load_time_avg",
                "Average time loading a shard of the group log took, in milliseconds.",
                value=load_ms,
            )

    # -- the group log ---------------------------------------------------------------------------------------

    def _storage(self) -> Iterator[Metric]:
        the_log = self._log()
        if the_log is None:
            return
        stats = the_log.stats()
        prefix = "kafka_group_coordinator_log_"
        yield GaugeMetricFamily(
            prefix + "bytes", "Durable bytes in the group log's segments.", value=stats.total_bytes
        )
        yield GaugeMetricFamily(prefix + "segments", "Segments of the group log.", value=stats.segments)
        yield GaugeMetricFamily(
            prefix + "entries", "Entries in the group log (after compaction).", value=stats.entries
        )
        yield CounterMetricFamily(
            prefix + "appends", "Appends made durable since the start.", value=stats.appends
        )
        yield CounterMetricFamily(
            prefix + "entries_appended", "Entries made durable since the start.", value=stats.entries_appended
        )
        yield CounterMetricFamily(
            prefix + "flushes", "Write+fsync rounds (group commits) since the start.", value=stats.flushes
        )
        yield CounterMetricFamily(
            prefix + "flush_failures",
            "Write or fsync rounds that failed since the start.",
            value=stats.failed_flushes,
        )
        yield CounterMetricFamily(
            prefix + "compactions", "Compactions of the group log since the start.", value=stats.compactions
        )
