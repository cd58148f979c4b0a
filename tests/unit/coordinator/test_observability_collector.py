"""The Prometheus collector over a real state machine (manual clock) and a fake data plane: names, types and
labels, lag for Stable, Empty and simple groups, cardinality controls, and the exposition's parseability."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.observability.collector import CoordinatorCollector
from coordinator.observability.history import GroupHistory
from coordinator.observability.lag import MetricsFilter, OffsetHistory, compile_pattern
from coordinator.observability.view import CoordinatorView
from coordinator.server.metrics import error_name, response_error
from protocol.api_keys import api_name

from .group.context import GroupTestContext


class FakeDataPlane:
    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        return self.ends.get((topic, partition))

    def partition_count(self, topic: str) -> int | None:
        parts = [p for t, p in self.ends if t == topic]
        return max(parts) + 1 if parts else None


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def scrape(
    ctx: GroupTestContext,
    history: GroupHistory,
    metrics_filter: MetricsFilter | None = None,
    ends: dict | None = None,
    offset_history: OffsetHistory | None = None,
    clock: Clock | None = None,
):
    dataplane = FakeDataPlane(ends or {("foo", 0): 150, ("foo", 1): 40, ("bar", 0): 10})
    view = CoordinatorView(ctx.shard, dataplane, history, offset_history, monotonic=clock or Clock())
    registry = CollectorRegistry()
    registry.register(
        CoordinatorCollector(
            view, metrics_filter or MetricsFilter(), cluster_name="c1", load_time_ms=lambda: 12.5
        )
    )
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return text, families


def samples(families, name: str) -> dict[tuple, float]:
    family_name = name.removesuffix("_total")
    out = {}
    for family in families.values():
        for s in family.samples:
            if s.name == name or (family.name == family_name and s.name == name):
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def setup() -> tuple[GroupTestContext, GroupHistory]:
    ctx = GroupTestContext()
    history = GroupHistory()
    ctx.shard.add_listener(history)
    ctx.commit("simple", {("foo", 0): 120, ("foo", 1): 40})  # generation -1, no members: a simple group
    empty = ctx.two_members_stable("empty")
    ctx.commit("empty", {("bar", 0): 4}, member_id=empty.leader_id, generation_id=1)
    ctx.leave_group("empty", [(empty.leader_id, None), (empty.follower_id, None)])
    result = ctx.two_members_stable("live")  # last: no time passes after it, so nobody's session runs out
    ctx.commit("live", {("foo", 0): 100}, member_id=result.leader_id, generation_id=1)
    return ctx, history


def test_kafka_exporter_names_and_lag_for_stable_empty_and_simple_groups():
    ctx, history = setup()
    assert ctx.group("empty").state.value == "Empty" and ctx.group("simple").state.value == "Empty"
    text, families = scrape(ctx, history)
    lag = samples(families, "kafka_consumergroup_lag")
    assert lag == {
        (("consumergroup", "empty"), ("partition", "0"), ("topic", "bar")): 6,
        (("consumergroup", "live"), ("partition", "0"), ("topic", "foo")): 50,
        (("consumergroup", "simple"), ("partition", "0"), ("topic", "foo")): 30,
        (("consumergroup", "simple"), ("partition", "1"), ("topic", "foo")): 0,
    }
    assert -1 not in lag.values()
    assert (
        samples(families, "kafka_consumergroup_uncommitted_partitions")[
            (("consumergroup", "live"), ("topic", "foo"))
        ]
        == 1
    )
    assert (
        samples(families, "kafka_consumergroup_lag_sum")[(("consumergroup", "simple"), ("topic", "foo"))]
        == 30
    )
    assert (
        samples(families, "kafka_consumergroup_current_offset_sum")[
            (("consumergroup", "simple"), ("topic", "foo"))
        ]
        == 160
    )
    assert samples(families, "kafka_consumergroup_members") == {
        (("consumergroup", "empty"),): 0,
        (("consumergroup", "live"),): 2,
        (("consumergroup", "simple"),): 0,
    }
    # The compatibility names ending in _sum/_count are untyped, so the exposition passes promtool's lint.
    for name in (
        "kafka_consumergroup_lag_sum",
        "kafka_consumergroup_current_offset_sum",
        "kafka_server_group_coordinator_metrics_group_count",
        "kafka_server_group_coordinator_metrics_offset_commit_count",
    ):
        assert f"# TYPE {name} untyped" in text, name
    assert "# TYPE kafka_consumergroup_lag gauge" in text
    assert "# TYPE kafka_consumergroup_rebalances_total counter" in text
    assert "# TYPE kafka_consumergroup_rebalance_duration_seconds histogram" in text


def test_coordinator_and_group_state_metrics():
    ctx, history = setup()
    _, families = scrape(ctx, history)
    jmx = "kafka_server_group_coordinator_metrics_"
    assert samples(families, jmx + "group_count") == {
        (("protocol", "classic"),): 3,
        (("protocol", "consumer"),): 0,
    }
    assert samples(families, jmx + "consumer_group_count")[(("state", "Stable"),)] == 0
    by_state = samples(families, jmx + "classic_group_count")
    assert by_state[(("state", "Stable"),)] == 1 and by_state[(("state", "Empty"),)] == 2
    assert samples(families, jmx + "offset_count") == {(): 4}
    assert samples(families, jmx + "offset_commit_count") == {(): 4}
    assert samples(families, jmx + "group_completed_rebalance_count") == {(): 2}
    assert samples(families, jmx + "partition_load_time_max") == {(): 12.5}
    state = samples(families, "kafka_consumergroup_state")
    assert state[(("consumergroup", "live"), ("protocol", "classic"), ("state", "Stable"))] == 1
    assert state[(("consumergroup", "live"), ("protocol", "classic"), ("state", "Empty"))] == 0
    assert samples(families, "kafka_consumergroup_generation")[(("consumergroup", "empty"),)] == 2
    rebalances = samples(families, "kafka_consumergroup_rebalances_total")
    assert rebalances[(("consumergroup", "empty"), ("reason", "leave"))] == 1
    assert rebalances[(("consumergroup", "live"), ("reason", "new_member"))] == 1
    durations = samples(families, "kafka_consumergroup_rebalance_duration_seconds_count")
    assert durations[(("consumergroup", "live"),)] == 1
    assert samples(families, "kafka_consumergroup_paused_partitions")[(("consumergroup", "live"),)] == 0


def test_lag_seconds_with_kafka_lag_exporter_labels():
    ctx, history = setup()
    offsets = OffsetHistory()
    for t in range(0, 11):
        offsets.record("foo", 0, 15 * t, float(t))  # 15 records/s, 150 at t=10
    clock = Clock()
    clock.now = 10.0
    _, families = scrape(ctx, history, offset_history=offsets, clock=clock)
    seconds = samples(families, "kafka_consumergroup_group_lag_seconds")
    key = (
        ("client_id", ""),
        ("cluster_name", "c1"),
        ("consumer_id", ""),
        ("group", "simple"),
        ("member_host", ""),
        ("partition", "0"),
        ("topic", "foo"),
    )
    assert abs(seconds[key] - (10.0 - 121 / 15)) < 1e-9  # offset 120 was appended at 121/15 s
    max_lag = samples(families, "kafka_consumergroup_group_max_lag_seconds")
    assert (
        max_lag[(("cluster_name", "c1"), ("group", "simple"), ("is_simple_consumer", "true"))] == seconds[key]
    )
    assert (
        samples(families, "kafka_partition_latest_offset")[
            (("cluster_name", "c1"), ("partition", "0"), ("topic", "foo"))
        ]
        == 150
    )


def test_cardinality_controls():
    ctx, history = setup()
    only_live = MetricsFilter(
        group_include=compile_pattern("live|simple"), group_exclude=compile_pattern("simple")
    )
    _, families = scrape(ctx, history, only_live)
    assert {dict(k)["consumergroup"] for k in samples(families, "kafka_consumergroup_members")} == {"live"}
    no_bar = MetricsFilter(topic_exclude=compile_pattern("bar"))
    _, families = scrape(ctx, history, no_bar)
    assert all(dict(k)["topic"] == "foo" for k in samples(families, "kafka_consumergroup_lag"))
    assert (
        samples(families, "kafka_consumergroup_members")[(("consumergroup", "empty"),)] == 0
    )  # still listed
    sums_only = MetricsFilter(per_partition=False)
    text, families = scrape(ctx, history, sums_only)
    for name in (
        "kafka_consumergroup_lag",
        "kafka_consumergroup_current_offset",
        "kafka_consumergroup_group_lag_seconds",
        "kafka_partition_latest_offset",
        "kafka_consumergroup_last_commit_timestamp_seconds",
    ):
        assert samples(families, name) == {}, name
    assert (
        samples(families, "kafka_consumergroup_lag_sum")[(("consumergroup", "live"), ("topic", "foo"))] == 50
    )
    assert "partition=" not in text.replace('le="', "")


def test_request_metric_helpers():
    assert api_name(11) == "JoinGroup" and api_name(8) == "OffsetCommit" and api_name(31999) == "31999"
    assert (
        error_name(0) == "NONE" and error_name(27) == "REBALANCE_IN_PROGRESS" and error_name(-9999) == "-9999"
    )
    assert response_error({"error_code": 25}) == 25
    nested = {
        "throttle_time": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": 0},
                    {"partition_index": 1, "error_code": 22},
                ],
            }
        ],
    }
    assert response_error(nested) == 22
    assert response_error({"topics": []}) == 0 and response_error(None) == 0
    # Entities: the nested arrays are looked into, an answer without any is read at the top only.
    from kio.schema.heartbeat.v4.response import HeartbeatResponse
    from kio.schema.offset_commit.v9.response import OffsetCommitResponse

    from protocol.build import build

    assert response_error(build(OffsetCommitResponse, nested)) == 22
    assert response_error(build(OffsetCommitResponse, {"topics": nested["topics"][:0]})) == 0
    assert response_error(build(HeartbeatResponse, {"error_code": 27})) == 27
    assert response_error(build(HeartbeatResponse, {"error_code": 0})) == 0
    # An entity given again is walked once (remembered by identity); a mapping is walked each time.
    answer = build(OffsetCommitResponse, nested)
    assert response_error(answer) == 22 and response_error(answer) == 22
    from coordinator.server import metrics

    assert metrics._ERRORS[id(answer)] == (answer, 22)
    nested["topics"][0]["partitions"][1]["error_code"] = 0
    assert response_error(nested) == 0 and id(nested) not in metrics._ERRORS


def test_paused_partitions_count_the_assigned_partitions_the_coordinator_withholds():
    from .group.test_pause import GROUP, pause, resume, stable_pair

    ctx, history = setup()
    stable_pair(ctx)  # foo-0/bar-0 to the leader, foo-1/bar-1 to the follower
    pause(ctx, GROUP, ["foo"])
    _, families = scrape(ctx, history)
    assert samples(families, "kafka_consumergroup_paused_partitions")[(("consumergroup", GROUP),)] == 2
    resume(ctx, GROUP, ["foo"])
    _, families = scrape(ctx, history)
    assert samples(families, "kafka_consumergroup_paused_partitions")[(("consumergroup", GROUP),)] == 0
