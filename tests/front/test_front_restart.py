"""The server in front of a real 3-node Kafka cluster is stateless: SIGKILLed and started again on an empty disk,
it goes on from its state topic on the cluster. A static group sees no rebalance, and nothing acknowledged is
lost."""

from __future__ import annotations

import shutil
import socket
import time
import uuid

import pytest

from tests.support.crash import CrashServer
from tests.support.kafka_cluster import NODE_IDS, create_replicated_topic
from tests.support.members import (
    check_exactly_once,
    committed_offsets,
    consumed_all,
    high_watermarks,
    produce_batch,
    wait_for,
    wait_split,
)
from tests.support.server import ServerStartError, start_server

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SESSION_MS = 30000
SETTINGS = {
    "partition.assignment.strategy": "range",
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 1000,
}
QUIET_S = 4.0


class FrontServer(CrashServer):
    def output(self) -> str:
        return self.stderr_tail()


def _free_block(size: int) -> int:
    """A port P with P..P+size-1 free now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + size > 65535:
            continue
        try:
            held = []
            for port in range(base, base + size):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no block of free ports")


def test_killed_and_restarted_on_an_empty_disk(members, kafka_cluster, direct, tmp_path):
    base = _free_block(2 + max(NODE_IDS))
    front = FrontServer(
        tmp_path / "front",
        {
            "upstream.bootstrap.servers": kafka_cluster.bootstrap,
            "upstream.node.port.base": base + 1,  # node N at base+1+N: the same ports after the restart
            "group.initial.rebalance.delay.ms": 0,
        },
    )
    front.port = base
    front.start()
    try:
        group, topic = "front-stateless", "front-stateless-topic"
        create_replicated_topic(front.bootstrap, topic, PARTITIONS)
        placed = produce_batch(front, topic, 300, 41, tmp_path)
        ms = [
            members.start("ck", f"s{i}", front, group, topic, instance_id=f"{group}-{i}", settings=SETTINGS)
            for i in range(3)
        ]
        split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=40)
        wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)
        seen = {m.name: len(m.rebalance_events()) for m in ms}

        front.kill()
        shutil.rmtree(front.data_dir)
        front.data_dir.mkdir()
        front.start()
        front.wait_ready()

        placed |= produce_batch(front, topic, 300, 42, tmp_path)
        wait_for(lambda: consumed_all(ms, placed), 60, "batch 2 consumed after the restart", members.describe)
        time.sleep(QUIET_S)
        for m in ms:
            assert m.alive(), members.describe([m])
            new = m.rebalance_events()[seen[m.name] :]
            assert new == [], f"{m.name} saw a rebalance across the restart: {new}\n{members.describe()}"
            assert m.held() == split[m.name]
        ends = high_watermarks(placed, PARTITIONS)
        wait_for(
            lambda: committed_offsets(direct, group, topic, PARTITIONS) == ends,
            30,
            "every commit in the cluster",
            members.describe,
        )
        for m in ms:
            assert m.close() == 0, members.describe([m])
        check_exactly_once(ms, placed)
    finally:
        front.kill()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_state_topic_with_another_partition_count_is_refused_at_start(kafka_cluster, tmp_path, workers):
    """Groups hash to shards by offsets.topic.num.partitions: on a state topic made with another count, groups
    would be looked for in other shards than they are in, so the server does not start (one process, or every
    worker of `--workers 2`), and says how to fix it."""
    topic = f"kgc-state-{uuid.uuid4().hex[:8]}"
    create_replicated_topic(kafka_cluster.bootstrap, topic, 3)
    settings = {
        "upstream.bootstrap.servers": kafka_cluster.bootstrap,
        "coordinator.state.topic": topic,
        "offsets.topic.num.partitions": 6,
    }
    started = time.monotonic()
    try:
        server = start_server(
            tmp_path / "server", settings, extra_args=["--workers", str(workers)], ready_timeout=90
        )
    except ServerStartError as refused:
        message = str(refused)
    else:
        output = server.output()
        server.stop()
        pytest.fail(f"the server started on a state topic of 3 partitions for 6 shards\n{output}")
    assert "exited with code 1" in message, message
    assert f"the state topic '{topic}' has 3 partitions" in message, message
    assert "Set offsets.topic.num.partitions=3." in message, message
    assert "Traceback" not in message, message
    assert time.monotonic() - started < 60, message
