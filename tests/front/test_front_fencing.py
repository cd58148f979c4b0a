"""Two servers on one state topic never both answer for a shard: a server that starts claims every shard's writer
on the cluster (its transactional id), which fences the server that held it. From the moment the new server is
ready the old one answers nothing from the shards it lost (reads included: DescribeGroups and Heartbeat answer
from a shard's memory), nothing it acknowledged is lost, and it says it is not ready.

(OffsetFetch is not a shard read in front of a cluster: it is answered from the cluster, coordinator.front.groups.)"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest

from tests.support.kafka_cluster import create_replicated_topic
from tests.support.server import readyz
from tests.support.wire import WireClient, make, request_class

pytestmark = pytest.mark.e2e

SHARDS = 3
REFUSED = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
NOT_COORDINATOR = 16


def _client(server) -> WireClient:
    host, port = server.bootstrap.split(",")[0].rsplit(":", 1)
    return WireClient(host, int(port), timeout=40)


def _commit(client: WireClient, group: str, topic: str, offset: int) -> int:
    answer = client.call(
        make(
            request_class(8, 8),
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
                        ],
                    }
                ],
            },
        )
    )
    return int(answer.topics[0].partitions[0].error_code)


def _describe(client: WireClient, groups: list[str]) -> list[tuple[int, str]]:
    """(error code, state) of each group, as DescribeGroups answers from the shards' memory."""
    answer = client.call(
        make(request_class(15, 5), {"groups": groups, "include_authorized_operations": False})
    )
    return [(int(g.error_code), g.group_state) for g in answer.groups]


def _offsets(server, group: str) -> dict[tuple[str, int], int]:
    """The group's offsets as the server's shard holds them (its admin API)."""
    with urllib.request.urlopen(f"{server.admin_url}/v1/groups/{group}", timeout=10) as answer:
        data = json.load(answer)
    return {(o["topic"], o["partition"]): o["committed_offset"] for o in data["offsets"]}


def _wait_ready(server, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while not readyz(server.admin_url):
        assert time.monotonic() < deadline, f"not ready within {timeout}s:\n{server.output()}"
        time.sleep(0.02)
    return time.monotonic()


def test_a_second_server_on_the_state_topic_fences_the_first(server_factory, kafka_cluster):
    state_topic = f"kgc-fencing-{uuid.uuid4().hex[:8]}"
    settings = {
        "upstream.bootstrap.servers": kafka_cluster.bootstrap,
        "coordinator.state.topic": state_topic,
        "offsets.topic.num.partitions": SHARDS,
        "coordinator.state.lease.ms": 1500,
    }
    old = server_factory(settings)
    _wait_ready(old)
    topic = "front-fencing-topic"
    create_replicated_topic(old.bootstrap, topic, 1)
    groups = [f"front-fencing-{i}" for i in range(12)]  # over every shard
    with _client(old) as c:
        for i, group in enumerate(groups):
            assert _commit(c, group, topic, 100 + i) == 0, old.output()
        assert _describe(c, groups) == [(0, "Empty")] * len(groups)

    new = server_factory(settings)
    _wait_ready(new)
    with _client(old) as c:
        # From the moment the new server is ready: the old one answers no read and takes no write.
        described = _describe(c, groups)
        assert all(code in REFUSED for code, _ in described), (described, old.output())
        for group in groups:
            assert _commit(c, group, topic, 999) in REFUSED
    with _client(new) as c:
        # Everything the old server acknowledged was replayed; nothing it refused was.
        assert _describe(c, groups) == [(0, "Empty")] * len(groups), new.output()
        assert [_offsets(new, g) for g in groups] == [{(topic, 0): 100 + i} for i in range(len(groups))]
        for i, group in enumerate(groups):
            assert _commit(c, group, topic, 200 + i) == 0

    # The old server finds out that it was fenced (by its next write or its lease check) and says so.
    deadline = time.monotonic() + 20
    while True:
        with _client(old) as c:
            described = _describe(c, groups)
        if not readyz(old.admin_url) and all(code == NOT_COORDINATOR for code, _ in described):
            break
        assert time.monotonic() < deadline, (described, old.output())
        time.sleep(0.2)
    assert "another server claimed" in old.output()
    assert [_offsets(new, g) for g in groups] == [{(topic, 0): 200 + i} for i in range(len(groups))]
