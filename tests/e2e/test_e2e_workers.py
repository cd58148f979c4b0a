"""`serve --workers 2` (coordinator.cluster) with real clients in their own processes.

Groups are picked so that their shards belong to different workers; each is checked to be coordinated by the
worker FindCoordinator names, to consume everything and commit it, to be seen by the AdminClient (which asks
every broker for ListGroups and the coordinator for DescribeGroups), and through worker 0's admin HTTP listener.
The process model: a SIGKILLed worker is restarted by the supervisor and its groups come back with their
committed offsets; SIGTERM stops every worker; a SIGKILLed supervisor takes its workers with it.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from coordinator.cluster.topology import owner_of  # noqa: E402
from tests.support.members import (  # noqa: E402 - the group e2e helpers live beside their own conftest
    admin,
    check_exactly_once,
    consumed_all,
    create_topic,
    high_watermarks,
    member_errors,
    produce_batch,
    wait_for,
)
from tests.support.server import running, worker_pid, worker_pids  # noqa: E402
from tests.support.wire import (
    WireClient,
    create_topics,
    decode_response,
    encode_request,
    make,
    recv_frame,
    request_class,
)

pytestmark = pytest.mark.e2e

WORKERS = 2
SHARDS = 50  # offsets.topic.num.partitions, the default
NODE_ID = 1  # node.id, the default
FIND_COORDINATOR, METADATA = 10, 3
PARTITIONS = 4


def group_on(worker: int, prefix: str) -> str:
    """The first group id `prefix-N` whose shard belongs to `worker`."""
    for i in range(1000):
        group = f"{prefix}-{i}"
        if owner_of(group, SHARDS, WORKERS) == worker:
            return group
    raise AssertionError("no group id found")


def start_workers(server_factory, **settings: object):
    return server_factory({"coordinator.workers": WORKERS, **settings})


def find_coordinator(host: str, port: int, group: str) -> tuple[int, int, int]:
    """(error code, node id, port) of FindCoordinator v3 for `group`, asked of the broker at host:port."""
    with WireClient(host, port) as client:
        answer = client.request(make(request_class(FIND_COORDINATOR, 3), {"key": group, "key_type": 0}))
    return answer.error_code, answer.node_id, answer.port


def metadata_brokers(host: str, port: int) -> list[tuple[int, str, int]]:
    with WireClient(host, port) as client:
        answer = client.request(
            make(
                request_class(METADATA, 12),
                {
                    "topics": None,
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
        )
    return sorted((b.node_id, b.host, b.port) for b in answer.brokers)


def http_json(url: str, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"{}")


def http_text(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def wait_ready(server, timeout: float = 60) -> None:
    wait_for(
        lambda: http_text(server.admin_url + "/readyz")[0] == 200,
        timeout,
        "/readyz to answer 200",
        server.output,
    )


def committed(server, group: str, topic: str) -> dict[int, int]:
    res = admin(server, "offsets", "--group", group, "--topic", topic, "--partitions", str(PARTITIONS))
    if res["error"] is not None or res.get("partition_errors"):
        return {}
    return {int(k.rsplit(":", 1)[1]): v for k, v in res["offsets"].items()}


def test_groups_of_two_workers_consume_commit_and_are_listed(server_factory, members, tmp_path):
    server = start_workers(server_factory)
    host, port0 = server.host, server.port
    ck_group = group_on(1, "workers-ck")
    kp_group = group_on(0, "workers-kp")

    # Every worker is a broker in Metadata, whichever is asked.
    brokers0 = metadata_brokers(host, port0)
    assert [b[0] for b in brokers0] == [NODE_ID, NODE_ID + 1]
    port1 = brokers0[1][2]
    assert port1 != port0
    assert metadata_brokers(host, port1) == brokers0

    # FindCoordinator names the owner, from either worker.
    for asked in (port0, port1):
        assert find_coordinator(host, asked, ck_group) == (0, NODE_ID + 1, port1)
        assert find_coordinator(host, asked, kp_group) == (0, NODE_ID, port0)

    topic = "workers-orders"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 200, seed=81, tmp_path=tmp_path)
    ck = members.start("ck", "ck-1", server, ck_group, topic)
    kp = members.start("kp", "kp-1", server, kp_group, topic)
    aio_group = group_on(1, "workers-aio")
    aio = members.start("aio", "aio-1", server, aio_group, topic)
    for member in (ck, kp, aio):
        wait_for(
            lambda m=member: consumed_all([m], placed),
            90,
            f"{member.name} to consume everything",
            members.describe,
        )
        check_exactly_once([member], placed)
    want = high_watermarks(placed, PARTITIONS)
    for group in (ck_group, kp_group, aio_group):
        wait_for(
            lambda g=group: committed(server, g, topic) == want,
            60,
            f"{group} to commit {want}",
            members.describe,
        )
    assert member_errors([ck, kp, aio]) == []

    # The AdminClient lists every worker's groups and describes each at its coordinator.
    listed = admin(server, "list")
    assert listed["error"] is None and listed["errors"] == [], listed
    listed_ids = {g["group_id"] for g in listed["groups"]}
    assert {ck_group, kp_group, aio_group} <= listed_ids, listed
    for group, worker in ((ck_group, 1), (kp_group, 0), (aio_group, 1)):
        described = admin(server, "describe", "--group", group)
        assert described["error"] is None, described
        assert described["state"] == "STABLE", described
        assert described["coordinator"]["id"] == NODE_ID + worker, described
        assert len(described["members"]) == 1, described

    # Worker 0's admin HTTP fronts both workers.
    status, body = http_json(server.admin_url + "/v1/groups")
    assert status == 200, body
    assert {ck_group, kp_group, aio_group} <= {g["group_id"] for g in body["groups"]}, body
    for group in (ck_group, kp_group):
        status, body = http_json(f"{server.admin_url}/v1/groups/{urllib.parse.quote(group, safe='')}")
        assert status == 200, body
        assert body["group_id"] == group and body["state"] == "Stable", body
        lags = {(o["topic"], o["partition"]): o["lag"] for o in body["offsets"]}
        assert lags == {(topic, p): 0 for p in range(PARTITIONS)}, body
    status, text = http_text(server.admin_url + "/metrics")
    assert status == 200
    for worker, group in ((0, kp_group), (1, ck_group)):
        assert f'kafka_consumergroup_members{{consumergroup="{group}",worker="{worker}"}} 1.0' in text, text[
            :3000
        ]
    assert text.count("# TYPE kafka_consumergroup_members gauge") == 1

    for member in (ck, kp, aio):
        assert member.close() == 0, member.summary()


JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS = 11, 14, 12, 8, 9, 15


def test_group_requests_sent_to_any_worker_are_answered_by_the_owner(server_factory):
    """A raw client that never asks FindCoordinator (written against one broker) drives a group owned by worker 1
    entirely through worker 0: join (with MEMBER_ID_REQUIRED first), sync, heartbeat, commit and fetch, and
    DescribeGroups / OffsetFetch v8 naming groups of both workers get every group's answer, in request order."""
    server = start_workers(server_factory, **{"group.initial.rebalance.delay.ms": 0})
    remote = group_on(1, "relay-remote")
    local = group_on(0, "relay-local")
    protocols = [{"name": "range", "metadata": b"\x00\x01"}]
    # Created a moment before worker 1 commits to it: its forwarder catches up instead of calling it unknown.
    create_topics(server.host, server.port, {"relay-topic": 1})
    with WireClient(server.host, server.port) as c:
        for group in (remote, local):
            join = {
                "group_id": group,
                "session_timeout": 30000,
                "rebalance_timeout": 30000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": protocols,
                "reason": None,
            }
            first = c.request(make(request_class(JOIN_GROUP, 9), join))
            assert first.error_code == 79, first  # MEMBER_ID_REQUIRED, from the owner
            joined = c.request(make(request_class(JOIN_GROUP, 9), {**join, "member_id": first.member_id}))
            assert joined.error_code == 0 and joined.leader == first.member_id, joined
            synced = c.request(
                make(
                    request_class(SYNC_GROUP, 5),
                    {
                        "group_id": group,
                        "generation_id": joined.generation_id,
                        "member_id": joined.member_id,
                        "group_instance_id": None,
                        "protocol_type": "consumer",
                        "protocol_name": "range",
                        "assignments": [{"member_id": joined.member_id, "assignment": b"a"}],
                    },
                )
            )
            assert (synced.error_code, synced.assignment) == (0, b"a"), synced
            beat = c.request(
                make(
                    request_class(HEARTBEAT, 4),
                    {
                        "group_id": group,
                        "generation_id": joined.generation_id,
                        "member_id": joined.member_id,
                        "group_instance_id": None,
                    },
                )
            )
            assert beat.error_code == 0, beat
            commit = c.request(
                make(
                    request_class(OFFSET_COMMIT, 8),
                    {
                        "group_id": group,
                        "generation_id_or_member_epoch": joined.generation_id,
                        "member_id": joined.member_id,
                        "group_instance_id": None,
                        "topics": [
                            {
                                "name": "relay-topic",
                                "partitions": [
                                    {
                                        "partition_index": 0,
                                        "committed_offset": 42 if group == remote else 7,
                                        "committed_leader_epoch": -1,
                                        "committed_metadata": group,
                                    }
                                ],
                            }
                        ],
                    },
                )
            )
            assert [p.error_code for t in commit.topics for p in t.partitions] == [0], commit

        described = c.request(
            make(
                request_class(DESCRIBE_GROUPS, 5),
                {"groups": [remote, "relay-missing", local], "include_authorized_operations": False},
            )
        )
        assert [(g.group_id, g.error_code, g.group_state, len(g.members)) for g in described.groups] == [
            (remote, 0, "Stable", 1),
            ("relay-missing", 0, "Dead", 0),
            (local, 0, "Stable", 1),
        ], described

        fetched = c.request(
            make(
                request_class(OFFSET_FETCH, 8),
                {
                    "groups": [{"group_id": g, "topics": None} for g in (local, remote)],
                    "require_stable": False,
                },
            )
        )
        got = {
            g.group_id: [(p.committed_offset, p.metadata) for t in g.topics for p in t.partitions]
            for g in fetched.groups
        }
        assert got == {local: [(7, local)], remote: [(42, remote)]}, fetched
    # Worker 1 holds the remote group: asked directly, it tells the same.
    port1 = metadata_brokers(server.host, server.port)[1][2]
    with WireClient(server.host, port1) as c:
        fetched = c.request(
            make(
                request_class(OFFSET_FETCH, 8),
                {"groups": [{"group_id": remote, "topics": None}], "require_stable": False},
            )
        )
        assert [p.committed_offset for g in fetched.groups for t in g.topics for p in t.partitions] == [42]


def test_a_killed_worker_is_restarted_and_its_groups_keep_their_offsets(server_factory, members, tmp_path):
    server = start_workers(server_factory)
    group = group_on(1, "workers-restart")
    topic = "workers-restart"
    create_topic(server, topic, PARTITIONS)
    first = produce_batch(server, topic, 120, seed=82, tmp_path=tmp_path)
    member = members.start("ck", "ck-before", server, group, topic)
    wait_for(lambda: consumed_all([member], first), 90, "the first batch to be consumed", members.describe)
    want = high_watermarks(first, PARTITIONS)
    wait_for(lambda: committed(server, group, topic) == want, 60, f"the commit of {want}", members.describe)
    assert member.close() == 0, member.summary()

    old = worker_pid(server, 1)
    other = worker_pid(server, 0)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not running(old), 10, f"worker 1 (pid {old}) to die")
    wait_for(
        lambda: [p for p in worker_pids(server.proc.pid) if p not in (old, other)],
        30,
        "the supervisor to start worker 1 again",
        server.output,
    )
    wait_ready(server)
    assert server.alive() and worker_pid(server, 0) == other
    assert committed(server, group, topic) == want

    # A new member of the group resumes from the recovered commits: it gets only what came after.
    second = produce_batch(server, topic, 80, seed=83, tmp_path=tmp_path)
    after = members.start("kp", "kp-after", server, group, topic)
    wait_for(lambda: consumed_all([after], second), 90, "the second batch to be consumed", members.describe)
    check_exactly_once([after], second)
    assert after.close() == 0, after.summary()


def test_sigterm_stops_every_worker(server_factory):
    server = start_workers(server_factory)
    wait_ready(server)
    pids = worker_pids(server.proc.pid)
    assert len(pids) == WORKERS
    assert server_factory.stop(server) == 0
    assert [p for p in pids if running(p)] == []
    assert "worker=1" in server.output() and "stopped" in server.output()


@pytest.mark.parametrize("owner", [1, 0])
def test_sigterm_answers_parked_and_relayed_joins_and_stops_at_once(server_factory, owner):
    """A JoinGroup parked in its group's initial rebalance delay (30 s), sent to the worker that does not own the
    group (relayed) and to the owner directly: SIGTERM answers both NOT_COORDINATOR, as Kafka does when it unloads
    a shard, and every worker is gone well inside shutdown.timeout.ms (10 s), instead of waiting for the delay or
    for a peer that stopped accepting."""
    server = start_workers(server_factory, **{"group.initial.rebalance.delay.ms": 30000})
    wait_ready(server)
    group = group_on(owner, "shutdown-parked")
    ports = {w: p for w, (_n, _h, p) in enumerate(metadata_brokers(server.host, server.port))}
    clients = [WireClient(server.host, ports[w], timeout=20) for w in (0, 1)]  # one relays, one is the owner
    try:
        cid = 7
        for w, c in enumerate(clients):
            # Static members join without MEMBER_ID_REQUIRED: both are parked in the 30 s delay at once.
            join = {
                "group_id": group,
                "session_timeout": 30000,
                "rebalance_timeout": 30000,
                "member_id": "",
                "group_instance_id": f"static-{w}",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
                "reason": None,
            }
            c.sock.sendall(encode_request(make(request_class(JOIN_GROUP, 9), join), cid))
        time.sleep(0.5)
        pids = worker_pids(server.proc.pid)
        started = time.monotonic()
        server.stopped = True
        server.proc.send_signal(signal.SIGTERM)
        for c in clients:
            got_cid, answer = decode_response(JOIN_GROUP, 9, recv_frame(c.sock))
            assert (got_cid, answer.error_code) == (cid, 16), answer  # NOT_COORDINATOR
        assert server.proc.wait(timeout=10) == 0, server.output()
        took = time.monotonic() - started
    finally:
        for c in clients:
            c.close()
    assert [p for p in pids if running(p)] == []
    assert took < 5.0, f"the workers took {took:.1f} s to stop\n{server.output()}"


def test_sigkill_of_the_supervisor_leaves_no_worker(server_factory):
    server = start_workers(server_factory)
    wait_ready(server)
    pids = worker_pids(server.proc.pid)
    assert len(pids) == WORKERS
    server.stopped = True  # the fixture must not count this exit as a crash
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while [p for p in pids if running(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if running(p)] == [], "workers outlived their SIGKILLed supervisor"
