"""The server in front of a real 3-node Kafka cluster, under faults: a broker SIGKILLed while a group consumes and
commits through the front (0 acknowledged commits lost, the consumers continue)."""

from __future__ import annotations

import pytest

from tests.support.kafka_cluster import create_replicated_topic
from tests.support.members import (
    check_exactly_once,
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
SETTINGS = {"session.timeout.ms": 30000, "heartbeat.interval.ms": 1000}


def test_a_broker_killed_while_a_group_consumes_and_commits(members, front, direct, kafka_cluster, tmp_path):
    group, topic = "front-broker-kill", "front-broker-kill-topic"
    create_replicated_topic(front.bootstrap, topic, PARTITIONS)
    placed = produce_batch(front, topic, 600, 31, tmp_path)
    a, b = (members.start("ck", name, front, group, topic, settings=SETTINGS) for name in ("a", "b"))
    wait_split(members, [a, b], PARTITIONS, even_sizes(PARTITIONS, 2), timeout=40)
    wait_for(lambda: consumed_all([a, b], placed), 40, "batch 1 consumed", members.describe)

    victim = 2
    kafka_cluster.kill(victim)
    try:
        placed |= produce_batch(front, topic, 600, 32, tmp_path)
        wait_for(
            lambda: consumed_all([a, b], placed), 90, "batch 2 consumed with a broker down", members.describe
        )
        ends = high_watermarks(placed, PARTITIONS)
        wait_for(
            lambda: committed_offsets(direct, group, topic, PARTITIONS) == ends,
            60,
            "every commit in the cluster",
            members.describe,
        )
        assert a.alive() and b.alive(), members.describe()
        rebalances = [len(m.rebalance_events()) for m in (a, b)]
    finally:
        kafka_cluster.start(victim)

    # The broker is back: nothing acknowledged was lost, and the group never noticed (no rebalance).
    wait_for(
        lambda: committed_offsets(direct, group, topic, PARTITIONS) == ends,
        60,
        "the commits",
        members.describe,
    )
    assert [len(m.rebalance_events()) for m in (a, b)] == rebalances
    for m in (a, b):
        assert m.close() == 0, members.describe([m])
    check_exactly_once([a, b], placed)
