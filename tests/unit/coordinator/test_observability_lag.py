"""Lag arithmetic, the lag-in-seconds estimate, and the history of log-end offsets it is made from."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.observability.lag import (
    MetricsFilter,
    OffsetHistory,
    compile_pattern,
    estimate_lag_seconds,
    group_lag,
)


@dataclasses.dataclass
class Committed:
    committed_offset: int
    commit_timestamp_ms: int = 1000
    metadata: str = ""


LEO = {("t", 0): 12, ("t", 1): 10, ("t", 2): 7, ("u", 0): 5}
COUNTS = {"t": 3, "u": 1}


def lag_of(offsets, subscribed=()):
    return group_lag(offsets, lambda t, p: LEO.get((t, p)), COUNTS.get, subscribed)


# -- lag in offsets ------------------------------------------------------------------------------------------


def test_lag_is_log_end_minus_committed_per_partition():
    lag = lag_of({"t": {0: Committed(5), 1: Committed(10)}})
    assert [(p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag) for p in lag.partitions] == [
        ("t", 0, 5, 12, 7),
        ("t", 1, 10, 10, 0),
    ]
    assert lag.lag_sum("t") == 7 and lag.current_offset_sum("t") == 15
    assert lag.uncommitted == {"t": 1}  # partition 2: consumed (its topic has commits) but never committed


def test_no_minus_one_sentinel_uncommitted_partitions_are_counted_instead():
    lag = lag_of({"t": {0: Committed(-1), 1: Committed(4)}})
    assert [(p.partition, p.lag) for p in lag.partitions] == [(1, 6)]
    assert all(p.lag >= 0 and p.committed_offset >= 0 for p in lag.partitions)
    assert lag.uncommitted == {"t": 2}
    assert lag.lag_sum() == 6


def test_subscribed_topics_without_commits_count_as_uncommitted():
    lag = lag_of({"t": {0: 12}}, subscribed=frozenset({"t", "u"}))
    assert lag.uncommitted == {"t": 2, "u": 1}
    assert lag.topics() == ["t", "u"]


def test_a_commit_past_the_log_end_is_zero_lag_and_a_deleted_topic_has_no_lag():
    lag = lag_of({"t": {2: Committed(9)}, "gone": {0: Committed(3)}})
    by_topic = {p.topic: p for p in lag.partitions}
    assert by_topic["t"].lag == 0
    assert by_topic["gone"].lag is None and by_topic["gone"].log_end_offset is None
    assert lag.lag_sum() == 0 and not lag.has_lag("gone")
    assert "gone" not in lag.uncommitted  # nothing to say about partitions of a topic that does not exist


def test_plain_int_offsets_are_accepted():
    assert [p.lag for p in lag_of({"u": {0: 2}}).partitions] == [3]


# -- lag in seconds ------------------------------------------------------------------------------------------


def steady(rate: float, until: float, step: float = 1.0):
    """Samples of a log that grew at `rate` records/s from offset 0 at t=0."""
    out, t = [], 0.0
    while t <= until:
        out.append((int(rate * t), t))
        t += step
    return out


def test_interpolates_between_the_samples_around_the_committed_offset():
    samples = steady(10, 5)  # (0,0) (10,1) ... (50,5)
    # The record at offset 15 was appended at (15 + 1) / 10 = 1.6 s at 10 records/s.
    assert estimate_lag_seconds(samples, 15, 5.0) == pytest.approx(3.4)
    assert estimate_lag_seconds(samples, 49, 5.0) == pytest.approx(0.0)
    assert estimate_lag_seconds(samples, 50, 5.0) == 0.0  # caught up
    assert estimate_lag_seconds(samples, 80, 5.0) == 0.0  # past the end is no lag either
    assert estimate_lag_seconds([], 3, 5.0) is None


def test_a_flat_stretch_places_the_record_after_it():
    samples = [(0, 0.0), (100, 10.0), (100, 20.0), (150, 25.0)]
    # Offset 100 was written after the log stood still at 100 until t=20, during the growth to 150 by t=25.
    assert estimate_lag_seconds(samples, 100, 25.0) == pytest.approx(25.0 - (20.0 + 1 / 50 * 5.0))


def test_records_older_than_the_history_are_extrapolated_at_the_average_rate():
    samples = [(100, 10.0), (200, 20.0)]  # 10 records/s
    assert estimate_lag_seconds(samples, 49, 20.0) == pytest.approx(20.0 - (10.0 - (100 - 50) / 10))
    flat = [(100, 10.0), (100, 20.0)]
    assert estimate_lag_seconds(flat, 49, 20.0) == pytest.approx(
        10.0
    )  # a lower bound: since the first sample


def test_history_compresses_flat_stretches_and_is_bounded():
    history = OffsetHistory(max_samples=4)
    for offset, t in [(0, 0.0), (5, 1.0), (5, 2.0), (5, 3.0), (5, 4.0)]:
        history.record("t", 0, offset, t)
    assert history.samples("t", 0) == [(0, 0.0), (5, 1.0), (5, 4.0)]
    for offset, t in [(6, 5.0), (7, 6.0), (8, 7.0)]:
        history.record("t", 0, offset, t)
    assert history.samples("t", 0) == [(5, 4.0), (6, 5.0), (7, 6.0), (8, 7.0)]  # the oldest went first
    history.record("t", 0, 2, 8.0)  # the log went back (recreated topic): start again
    assert history.samples("t", 0) == [(2, 8.0)]
    history.retain([("u", 0)])
    assert history.samples("t", 0) == [] and len(history) == 0


def test_history_estimate_uses_the_current_log_end_as_the_newest_point():
    history = OffsetHistory()
    for offset, t in steady(10, 4):
        history.record("t", 0, offset, t)
    # Now t=5 and the log is at 50 (not sampled yet): the record at 45 was appended at 4.6 s.
    assert history.lag_seconds("t", 0, 45, 50, 5.0) == pytest.approx(0.4)
    assert history.lag_seconds("t", 0, 50, 50, 5.0) == 0.0
    assert OffsetHistory().lag_seconds("t", 0, 3, 10, 5.0) is None  # nothing known yet
    with pytest.raises(ValueError):
        OffsetHistory(max_samples=1)


# -- cardinality filters -------------------------------------------------------------------------------------


def test_filters_match_whole_names_include_then_exclude():
    f = MetricsFilter(
        compile_pattern("payments-.*|billing"),
        compile_pattern(".*-test"),
        compile_pattern(""),
        compile_pattern("__.*"),
    )
    assert f.group("payments-eu") and f.group("billing")
    assert not f.group("old-payments-eu")  # whole-name match, not search
    assert not f.group("payments-test")  # excluded wins
    assert not f.group("billing-2")
    assert f.topic("orders") and not f.topic("__consumer_offsets")
    assert MetricsFilter().group("anything") and MetricsFilter().topic("anything")


def test_filters_from_config():
    from coordinator.config import Config

    config = Config.load(
        environ={},
        overrides=["metrics.groups.exclude=spark-kafka-source-.*", "metrics.partition.series.enable=false"],
    )
    f = MetricsFilter.from_config(config)
    assert not f.group("spark-kafka-source-1234-driver-0") and f.group("etl")
    assert f.per_partition is False
