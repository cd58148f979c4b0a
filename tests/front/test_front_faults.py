"""The server in front of a real 3-node Kafka cluster, under faults: a broker SIGKILLed while a group consumes and
commits through the front (0 acknowledged commits lost, the consumers continue); the whole cluster not answering
(clients get their answer or their connection closed within upstream.request.timeout.ms, never a hang; /readyz and
/metrics say so, and recover with the cluster)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from tests.support.kafka_cluster import create_replicated_topic, elect_preferred_leaders
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
    assert [len(m.rebalance_events()) for m in (a, b)] == rebalances, (
        [(m.name, m.rebalance_events(), m.errors()) for m in (a, b)],
        members.describe(),
    )

    # Its partitions' leadership moves back to it (a preferred election; Kafka's own runs every 5 minutes): the
    # consumers' connections to its address here, which went to another broker while it was down, reach it again.
    elect_preferred_leaders(direct.bootstrap, topic, PARTITIONS)
    placed |= produce_batch(front, topic, 600, 33, tmp_path)
    wait_for(
        lambda: consumed_all([a, b], placed), 60, "batch 3 consumed after the election", members.describe
    )
    for m in (a, b):
        assert m.close() == 0, members.describe([m])
    check_exactly_once([a, b], placed)


def _readyz(front) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(front.admin_url + "/readyz", timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.load(exc)


def _metric(front, name: str) -> dict[str, float]:
    with urllib.request.urlopen(front.admin_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{")
    }


def test_an_unresponsive_cluster_is_a_timeout_not_a_hang(server_factory, kafka_cluster):
    from tests.support.wire import WireClient, make, request_class

    front = server_factory(
        {"upstream.bootstrap.servers": kafka_cluster.bootstrap, "upstream.request.timeout.ms": 2000}
    )
    status, body = _readyz(front)
    assert status == 200 and body["upstream"]["reachable"], body
    assert set(body["upstream"]["brokers"]) == {"1", "2", "3"}
    deadline = time.monotonic() + 15  # each broker is probed in turn, one a second
    while set(_metric(front, "kafka_group_coordinator_upstream_broker_up").values()) != {1.0}:
        assert time.monotonic() < deadline, _readyz(front)
        time.sleep(0.5)

    host, port = front.bootstrap.rsplit(":", 1)
    kafka_cluster.pause(True)
    try:
        started = time.monotonic()
        with WireClient(host, int(port), timeout=15) as client:
            client.send(
                make(
                    request_class(3, 12),
                    {
                        "topics": None,
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False,
                    },
                )
            )
            with pytest.raises((EOFError, ConnectionError, socket.timeout, OSError)):
                client.sock.settimeout(15)
                if not client.sock.recv(4):
                    raise EOFError("closed")
        took = time.monotonic() - started
        assert took < 6, f"the Metadata request waited {took:.1f}s for a cluster that does not answer"
        deadline = time.monotonic() + 15
        while _readyz(front)[0] != 503:
            assert time.monotonic() < deadline, _readyz(front)
            time.sleep(0.5)
        status, body = _readyz(front)
        assert not body["upstream"]["reachable"], body
        assert 0.0 in _metric(front, "kafka_group_coordinator_upstream_broker_up").values()
    finally:
        kafka_cluster.pause(False)
    deadline = time.monotonic() + 30
    while _readyz(front)[0] != 200:
        assert time.monotonic() < deadline, _readyz(front)
        time.sleep(0.5)
