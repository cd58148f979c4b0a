"""The server in front of a real 3-node Kafka cluster: groups are coordinated by the server, and the cluster stays
the record of their offsets (every acknowledged commit is in its __consumer_offsets, a group that committed
directly on the cluster continues through the front from there, Kafka's own tool pointed at the cluster shows
the offsets committed through the front)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.java import fetch_jar_set, run_java_tool
from tests.support.kafka_cluster import cluster_committed, create_replicated_topic
from tests.support.members import (
    admin_http,
    check_exactly_once,
    commit_errors,
    committed_offsets,
    consumed_all,
    even_sizes,
    high_watermarks,
    produce_batch,
    wait_for,
    wait_split,
)

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SETTINGS = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 500}
TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture(scope="session")
def kafka_tools() -> Path:
    return fetch_jar_set("kafka-tools")


def test_group_through_the_front_commits_to_the_cluster(
    members, server_factory, direct, tmp_path, kafka_tools
):
    front = server_factory(
        {"upstream.bootstrap.servers": direct.bootstrap, "upstream.offsets.recommit.interval.ms": 2000}
    )
    group, topic = "front-group", "front-group-topic"
    create_replicated_topic(front.bootstrap, topic, PARTITIONS)
    placed = produce_batch(front, topic, 600, 11, tmp_path)
    a, b = (members.start("ck", name, front, group, topic, settings=SETTINGS) for name in ("a", "b"))
    wait_split(members, [a, b], PARTITIONS, even_sizes(PARTITIONS, 2), timeout=40)
    wait_for(lambda: consumed_all([a, b], placed), 40, "the batch consumed", members.describe)
    ends = high_watermarks(placed, PARTITIONS)
    wait_for(
        lambda: committed_offsets(front, group, topic, PARTITIONS) == ends,
        20,
        "the commits",
        members.describe,
    )
    # Every acknowledged commit is the cluster's too: read there, without the front.
    assert committed_offsets(direct, group, topic, PARTITIONS) == ends
    # Lag as standalone, from the cluster's log-end offsets.
    wait_for(
        lambda: admin_http(front, "GET", f"/v1/groups/{group}")[1].get("lag") == 0,
        20,
        "the group's lag from the cluster's log-end offsets",
        members.describe,
    )
    described = admin_http(front, "GET", f"/v1/groups/{group}")[1]
    assert {o["partition"]: o["log_end_offset"] for o in described["offsets"]} == ends, described

    # Kafka's own tool pointed at the cluster shows them (a simple group there: no members, no lag).
    out = run_java_tool(
        kafka_tools,
        TOOL,
        "--bootstrap-server",
        direct.bootstrap,
        "--describe",
        "--group",
        group,
        server=direct,
    ).stdout
    shown = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[0] == group and cols[1] == topic:
            shown[int(cols[2])] = (int(cols[3]), int(cols[4]), cols[5])
    assert shown == {p: (ends[p], ends[p], "0") for p in range(PARTITIONS)}, out

    # Offsets gone from the cluster (as its offsets.retention.minutes would expire them) while the group lives
    # and has nothing new to commit: the front writes them again (upstream.offsets.recommit.interval.ms).
    from confluent_kafka.admin import AdminClient

    cluster_admin = AdminClient({"bootstrap.servers": direct.bootstrap})
    # Empty there: deleted with its offsets (a failed deletion raises here). Not read back before the wait below: the
    # front's next re-commit can land within the 2 s it takes to ask, which is what the wait checks for anyway.
    for future in cluster_admin.delete_consumer_groups([group]).values():
        future.result(30)
    wait_for(
        lambda: cluster_committed(direct.bootstrap, group, topic, PARTITIONS) == ends,
        20,
        "the live group's offsets re-committed to the cluster",
        members.describe,
    )

    for m in (a, b):
        assert m.close() == 0, members.describe([m])
    check_exactly_once([a, b], placed)
    assert commit_errors([a, b]) == [], members.describe()


def test_group_that_committed_on_the_cluster_continues_through_the_front(members, front, direct, tmp_path):
    group, topic = "front-moved", "front-moved-topic"
    create_replicated_topic(direct.bootstrap, topic, PARTITIONS)
    first = produce_batch(direct, topic, 300, 21, tmp_path)
    old = members.start("ck", "old", direct, group, topic, settings=SETTINGS)
    wait_split(members, [old], PARTITIONS, [PARTITIONS], timeout=40, stable_for=0)
    wait_for(lambda: consumed_all([old], first), 40, "batch 1 consumed on the cluster", members.describe)
    ends = high_watermarks(first, PARTITIONS)
    wait_for(
        lambda: committed_offsets(direct, group, topic, PARTITIONS) == ends,
        20,
        "its commits",
        members.describe,
    )
    assert old.close() == 0, members.describe([old])

    # The same group id through the front: it starts from the cluster's offsets, no reset needed.
    second = produce_batch(front, topic, 300, 22, tmp_path)
    new = members.start("ck", "new", front, group, topic, settings=SETTINGS)
    wait_split(members, [new], PARTITIONS, [PARTITIONS], timeout=40, stable_for=0)
    wait_for(lambda: consumed_all([new], second), 40, "batch 2 consumed through the front", members.describe)
    assert new.close() == 0, members.describe([new])
    assert {(p, o) for p, o, _k in new.records()} == set(second), "re-read what the cluster had committed"
    check_exactly_once([old, new], first | second)
    everything = high_watermarks(first | second, PARTITIONS)
    assert committed_offsets(direct, group, topic, PARTITIONS) == everything


def test_a_group_with_members_of_its_own_on_the_cluster_is_reported(members, front, direct, tmp_path):
    """Split brain: a client that bypasses the front with the same group id makes the cluster refuse the front's
    commits for it; that is reported (/readyz, /metrics), not fought."""
    import json
    import urllib.request

    group, topic = "front-split-brain", "front-split-brain-topic"
    create_replicated_topic(front.bootstrap, topic, PARTITIONS)
    placed = produce_batch(front, topic, 60, 61, tmp_path)
    bypass = members.start("ck", "bypass", direct, group, topic, settings=SETTINGS)
    wait_split(members, [bypass], PARTITIONS, [PARTITIONS], timeout=40, stable_for=0)
    through = members.start("ck", "through", front, group, topic, settings=SETTINGS)
    wait_split(members, [through], PARTITIONS, [PARTITIONS], timeout=40, stable_for=0)
    # Records for both sides to consume and commit (the cluster may already hold the bypass's offsets at the end).
    placed |= produce_batch(front, topic, 60, 62, tmp_path)

    def reported() -> bool:
        with urllib.request.urlopen(front.admin_url + "/readyz", timeout=10) as response:
            body = json.load(response)
        return group in body["upstream"]["split_brain_groups"]

    wait_for(reported, 40, "the split brain reported in /readyz", members.describe)
    with urllib.request.urlopen(front.admin_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert any(
        line.startswith("kafka_group_coordinator_upstream_split_brain_commits_total ")
        and float(line.split()[-1]) >= 1
        for line in text.splitlines()
    ), text[-2000:]
    assert placed  # the records exist; what the two sides consumed is not the point here
    for m in (through, bypass):
        m.kill()


def test_a_consumer_group_members_offset_fetch_is_checked_against_its_epoch(front):
    """OffsetFetch v9 from a consumer group's member: the member and its epoch are checked here, as Kafka checks
    them (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), before the offsets are read from the cluster."""
    from tests.support.wire import WireClient, make, request_class

    group, topic = "front-fetch-epoch", "front-fetch-epoch-topic"
    create_replicated_topic(front.bootstrap, topic, 2)
    host, port = front.bootstrap.split(",")[0].rsplit(":", 1)
    with WireClient(host, int(port), timeout=20) as c:

        def heartbeat(member_id: str, epoch: int) -> object:
            return c.call(
                make(
                    request_class(68, 0),
                    {
                        "group_id": group,
                        "member_id": member_id,
                        "member_epoch": epoch,
                        "rebalance_timeout": 30000,
                        "subscribed_topic_names": [topic],
                        "topic_partitions": [],
                    },
                )
            )

        def fetch(member_id: str | None, epoch: int) -> object:
            answer = c.call(
                make(
                    request_class(9, 9),
                    {
                        "groups": [
                            {
                                "group_id": group,
                                "member_id": member_id,
                                "member_epoch": epoch,
                                "topics": [{"name": topic, "partition_indexes": [0]}],
                            }
                        ],
                        "require_stable": True,
                    },
                )
            )
            return answer.groups[0]

        joined = heartbeat("", 0)
        assert joined.error_code == 0, joined
        member_id, epoch = joined.member_id, joined.member_epoch
        committed = c.call(
            make(
                request_class(8, 9),
                {
                    "group_id": group,
                    "generation_id_or_member_epoch": epoch,
                    "member_id": member_id,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}
                            ],
                        }
                    ],
                },
            )
        )
        assert committed.topics[0].partitions[0].error_code == 0, committed

        def offset(answer) -> int:
            assert answer.error_code == 0, answer
            return answer.topics[0].partitions[0].committed_offset

        assert offset(fetch(member_id, epoch)) == 7
        assert offset(fetch(None, -1)) == 7  # an admin's fetch is not checked
        assert fetch(member_id, epoch + 5).error_code == 113  # STALE_MEMBER_EPOCH
        assert fetch("nobody", epoch).error_code == 25  # UNKNOWN_MEMBER_ID
        assert heartbeat(member_id, -1).error_code == 0
