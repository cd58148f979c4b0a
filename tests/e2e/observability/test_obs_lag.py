"""Lag on /metrics equals log-end offset minus committed offset, for a live group and after it is Empty.

A real confluent-kafka group (two members, each in its own process) consumes part of a 4-partition topic and
commits synchronously; the expected numbers come from the producer's delivery reports (log-end offsets) and from
the members' own reports of successful commits, not from the server.
"""

from __future__ import annotations

import time

import pytest
from obs_support import get_json, metrics, produce, value, wait_until

pytestmark = pytest.mark.e2e

TOPIC, GROUP, PARTITIONS, PER_PARTITION = "obs-lag", "obs-lag-group", 4, 25


def committed_offsets(*members) -> dict[int, int]:
    """partition -> last committed offset across members, by commit time (partitions move between members)."""
    events = sorted((e for m in members for e in m.events("commit")), key=lambda e: e["t"])
    out: dict[int, int] = {}
    for e in events:
        out.update({int(p): o for p, o in e["offsets"].items()})
    return out


def check_lag(server, ends: dict[int, int], committed: dict[int, int], members: int, state: str) -> None:
    samples = metrics(server)
    labels = {"consumergroup": GROUP, "topic": TOPIC}
    lag_samples = {
        int(lbl["partition"]): v
        for lbl, v in samples.get("kafka_consumergroup_lag", [])
        if lbl["consumergroup"] == GROUP
    }
    # Every sample is log-end offset minus committed offset; partitions without a commit have none (no -1).
    assert lag_samples == {p: ends[p] - o for p, o in committed.items()}, (lag_samples, ends, committed)
    offset_samples = {
        int(lbl["partition"]): v
        for lbl, v in samples.get("kafka_consumergroup_current_offset", [])
        if lbl["consumergroup"] == GROUP
    }
    assert offset_samples == committed
    assert value(samples, "kafka_consumergroup_lag_sum", **labels) == sum(
        ends[p] - o for p, o in committed.items()
    )
    assert value(samples, "kafka_consumergroup_current_offset_sum", **labels) == sum(committed.values())
    assert value(samples, "kafka_consumergroup_uncommitted_partitions", **labels) == PARTITIONS - len(
        committed
    )
    assert value(samples, "kafka_consumergroup_members", consumergroup=GROUP) == members
    assert value(samples, "kafka_consumergroup_state", consumergroup=GROUP, state=state) == 1
    assert all(v >= 0 for vs in samples.values() for _, v in vs if _.get("consumergroup") == GROUP)

    status, described = get_json(server, f"/v1/groups/{GROUP}")
    assert status == 200
    assert {
        o["partition"]: (o["committed_offset"], o["log_end_offset"], o["lag"]) for o in described["offsets"]
    } == {p: (o, ends[p], ends[p] - o) for p, o in committed.items()}
    assert described["state"] == state


def settled_lag(server, ends: dict[int, int], committed: dict[int, int], members: int, state: str) -> None:
    """check_lag once the figures have settled: with several workers, a group owned by a worker other than
    worker 0 gets its log-end offsets from a cache that worker refreshes every second (forward.py), and lag is
    sampled every metrics.lag.sample.interval.ms; the last failure is raised if it never holds."""
    deadline = time.monotonic() + 15
    while True:
        try:
            check_lag(server, ends, committed, members, state)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_lag_equals_log_end_minus_committed_live_and_empty(server_factory, members):
    server = server_factory({"metrics.lag.sample.interval.ms": 200})
    ends = produce(server, TOPIC, PARTITIONS, PER_PARTITION)
    assert ends == {p: PER_PARTITION for p in range(PARTITIONS)}

    a = members.start("lag-a", server, GROUP, TOPIC, "--quota", "30")
    b = members.start("lag-b", server, GROUP, TOPIC, "--quota", "17")

    def done() -> bool:
        return all(
            m.events("commit") and m.events("commit")[-1]["processed"] == q for m, q in ((a, 30), (b, 17))
        )

    wait_until(done, 60, "both members to process and commit their quotas", members.describe)

    def stable_with_two() -> bool:
        _, described = get_json(server, f"/v1/groups/{GROUP}")
        return described.get("state") == "Stable" and len(described["members"]) == 2

    wait_until(stable_with_two, 30, "a Stable group of two", members.describe)
    committed = committed_offsets(a, b)
    assert 0 < len(committed) <= PARTITIONS
    assert sum(PER_PARTITION - o for o in committed.values()) > 0  # part of the topic only
    settled_lag(server, ends, committed, members=2, state="Stable")

    a.close()
    b.close()
    assert committed_offsets(a, b) == committed  # nothing processed past the quotas

    def empty() -> bool:
        _, described = get_json(server, f"/v1/groups/{GROUP}")
        return described.get("state") == "Empty"

    wait_until(empty, 30, "the group to be Empty after both members left", members.describe)
    settled_lag(server, ends, committed, members=0, state="Empty")
