"""Pause and resume from the coordinator (issue #5 item 1) with real confluent-kafka (librdkafka) consumers.

Stock consumers, nothing changed in them: the coordinator withholds paused partitions from the assignments it
hands out and rebalances the group at pause and resume. Checked here: pausing one of two subscribed topics stops
that topic only (range and cooperative-sticky), pausing the whole group stops everything, both stay paused across
a coordinator restart (the consumers keep running and reconnect to the same port), and after resume everything
produced meanwhile is consumed (exactly once for the whole-group pause, whose members commit synchronously).
A group of another protocol type cannot be paused.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.members import (
    GROUP_CLIENTS,
    MEMBER_SCRIPTS,
    Member,
    Members,
    admin_http,
    check_exactly_once,
    consumed_all,
    create_topic,
    produce_batch,
    wait_for,
    wait_ready,
)
from tests.support.server import PYTHON, REPO

pytestmark = pytest.mark.e2e

PARTITIONS = 3
CLIENT = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "reconnect.backoff.max.ms": 1000,
    "topic.metadata.refresh.interval.ms": 2000,
}
QUIET_S = 3.0  # a paused topic's records would have been fetched by then (the members poll every 0.2 s)


# -- helpers -----------------------------------------------------------------------------------------------------


http = admin_http


def cli(server: Any, *args: str) -> subprocess.CompletedProcess:
    """`python -m coordinator groups --admin URL ARGS...` in its own process."""
    return subprocess.run(
        [PYTHON, "-m", "coordinator", "groups", "--admin", server.admin_url, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_member(
    pool: Members,
    name: str,
    server: Any,
    group: str,
    topic: str,
    settings: dict[str, Any],
    commit: str = "sync",
) -> Member:
    """A ck_member.py process; `topic` may be a librdkafka regex ("^..."), then offsets are auto-committed."""
    cmd = [
        PYTHON,
        str(GROUP_CLIENTS / MEMBER_SCRIPTS["ck"]),
        "--bootstrap",
        server.bootstrap,
        "--group",
        group,
        "--topic",
        topic,
        "--events",
        "",
        "--name",
        name,
        "--max-runtime",
        "240",
        "--commit",
        commit,
    ]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    member = Member("ck", name, cmd, pool.run_dir)
    member.cmd[member.cmd.index("--events") + 1] = str(member.events_path)
    pool.all.append(member)
    pool.server = server
    return member.start()


def wait_settled(server: Any, group: str, pool: Members, quiet_s: float = 3.0, timeout: float = 60) -> dict:
    """Wait until the group has been Stable in the same generation for `quiet_s`; return its description."""
    seen: list[Any] = [None, 0.0]

    def settled() -> dict | None:
        status, data = http(server, "GET", f"/v1/groups/{group}")
        if status != 200 or data["state"] != "Stable" or len(data["members"]) == 0:
            seen[0] = None
            return None
        if seen[0] != data["generation"]:
            seen[0], seen[1] = data["generation"], time.monotonic()
            return None
        return data if time.monotonic() - seen[1] >= quiet_s else None

    return wait_for(settled, timeout, f"group {group} to settle", pool.describe, interval=0.25)


def consuming_pair(
    members: Members, server: Any, group: str, topic: str, name: str, count: int, seed: int, tmp_path: Path
) -> tuple[list[Member], dict]:
    """Two range members of `group` on a new 4-partition `topic` (committing synchronously), `count` records
    produced and consumed, the group settled: (members, the records placed)."""
    create_topic(server, topic, 4)
    settings = {**CLIENT, "partition.assignment.strategy": "range"}
    ms = [start_member(members, f"{name}{i}", server, group, topic, settings) for i in range(2)]
    placed = produce_batch(server, topic, count, seed, tmp_path)
    wait_for(lambda: consumed_all(ms, placed), 60, "batch 1 consumed", members.describe)
    wait_settled(server, group, members)
    return ms, placed


def keys(placed: dict[tuple[int, int], str]) -> set[str]:
    return set(placed.values())


def consumed_keys(members: list[Member]) -> set[str]:
    return {k for m in members for _p, _o, k in m.records() if k is not None}


# -- tests ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_pausing_one_of_two_topics_stops_only_that_topic_across_a_restart(
    members, server_factory, tmp_path, strategy
):
    server = server_factory()
    group = f"pause-topic-{strategy}"
    paused, other = f"pz-{strategy}-orders", f"pz-{strategy}-audit"
    for topic in (paused, other):
        create_topic(server, topic, PARTITIONS)
    settings = {
        **CLIENT,
        "partition.assignment.strategy": strategy,
        "enable.auto.commit": "true",
        "auto.commit.interval.ms": 200,
    }
    pattern = f"^pz-{strategy}-(orders|audit)$"
    ms = [start_member(members, f"m{i}", server, group, pattern, settings, commit="none") for i in range(2)]
    batch1 = produce_batch(server, paused, 60, 500, tmp_path) | produce_batch(
        server, other, 60, 501, tmp_path
    )
    wait_for(
        lambda: consumed_keys(ms) >= keys(batch1), 60, "batch 1 of both topics consumed", members.describe
    )
    wait_settled(server, group, members)

    result = cli(server, "pause", group, "--topic", paused)
    assert result.returncode == 0, result.stderr
    assert f"Paused: {paused}" in result.stdout, result.stdout
    described = wait_settled(server, group, members)
    assert described["paused"] == {"group": False, "topics": [paused]}
    held = [a["topic"] for m in described["members"] for a in m["assignment"] or ()]
    assert other in held and paused not in held, described["members"]
    timeline = http(server, "GET", f"/v1/groups/{group}/timeline")[1]["rebalances"]
    assert "pause" in [r["reason"] for r in timeline], timeline

    held_paused = produce_batch(server, paused, 60, 502, tmp_path)
    batch2 = produce_batch(server, other, 60, 503, tmp_path)
    wait_for(
        lambda: consumed_keys(ms) >= keys(batch2),
        60,
        "the other topic consumed while paused",
        members.describe,
    )
    time.sleep(QUIET_S)
    assert not consumed_keys(ms) & keys(held_paused), (
        "records of the paused topic were consumed\n" + members.describe()
    )

    server = server_factory.restart_on_same_port(server)
    wait_ready(server)
    described = wait_settled(server, group, members)
    assert described["paused"] == {"group": False, "topics": [paused]}
    held_paused |= produce_batch(server, paused, 60, 504, tmp_path)
    batch3 = produce_batch(server, other, 60, 505, tmp_path)
    wait_for(
        lambda: consumed_keys(ms) >= keys(batch3),
        90,
        "the other topic consumed after the restart",
        members.describe,
    )
    time.sleep(QUIET_S)
    assert not consumed_keys(ms) & keys(held_paused), (
        "records of the paused topic were consumed after the coordinator restarted\n" + members.describe()
    )
    assert all(m.alive() for m in ms), members.describe()

    result = cli(server, "resume", group, "--topic", paused)
    assert result.returncode == 0, result.stderr
    wait_for(
        lambda: consumed_keys(ms) >= keys(held_paused),
        90,
        "everything produced to the paused topic consumed after resume",
        members.describe,
    )
    described = wait_settled(server, group, members)
    assert described["paused"] == {"group": False, "topics": []}
    assert len(described["members"]) == 2
    for m in ms:
        assert not [e for e in m.errors() if e.get("fatal")], members.describe([m])
        assert m.close() == 0, members.describe([m])


def test_pausing_a_whole_group_stops_it_across_a_restart_and_resume_consumes_exactly_once(
    members, server_factory, tmp_path
):
    server = server_factory()
    group, topic = "pause-whole", "pause-whole-topic"
    ms, placed = consuming_pair(members, server, group, topic, "w", 200, 510, tmp_path)

    status, answer = http(server, "POST", f"/v1/groups/{group}/pause")
    assert status == 200 and answer["paused"] == {"group": True, "topics": []}, answer
    wait_for(
        lambda: all(m.held() == frozenset() and m.events("assigned") for m in ms),
        60,
        "both members to hold nothing",
        members.describe,
    )
    wait_settled(server, group, members)
    during = produce_batch(server, topic, 200, 511, tmp_path)
    time.sleep(QUIET_S)
    consumed = {(p, o) for m in ms for p, o, _k in m.records()}
    assert not consumed & during.keys(), "a paused group consumed\n" + members.describe()

    server = server_factory.restart_on_same_port(server)
    wait_ready(server)
    described = wait_settled(server, group, members)
    assert described["paused"] == {"group": True, "topics": []}
    during |= produce_batch(server, topic, 100, 512, tmp_path)
    time.sleep(QUIET_S)
    consumed = {(p, o) for m in ms for p, o, _k in m.records()}
    assert not consumed & during.keys(), (
        "a paused group consumed after the coordinator restarted\n" + members.describe()
    )

    status, answer = http(server, "POST", f"/v1/groups/{group}/resume", {})
    assert status == 200 and answer["paused"] == {"group": False, "topics": []}, answer
    placed |= during
    wait_for(lambda: consumed_all(ms, placed), 90, "everything consumed after resume", members.describe)
    for m in ms:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(ms, placed)


def test_a_group_of_another_protocol_type_cannot_be_paused(server):
    from kio.index import load_request_schema

    from protocol.build import build
    from tests.support.wire import WireClient

    wait_ready(server)
    host, port = server.bootstrap.rsplit(":", 1)
    join = build(
        load_request_schema(11, 5),
        {
            "group_id": "connect-like",
            "session_timeout": 10000,
            "rebalance_timeout": 10000,
            "member_id": "",
            "group_instance_id": "worker-1",
            "protocol_type": "connect",
            "protocols": [{"name": "default", "metadata": b"\x00\x01"}],
            "reason": None,
        },
    )
    with WireClient(host, int(port)) as client:
        answer = client.call(join)
    assert answer.error_code == 0, answer

    status, body = http(server, "POST", "/v1/groups/connect-like/pause", {"topics": ["x"]})
    assert status == 409 and body["error"] == "INCONSISTENT_GROUP_PROTOCOL", body
    assert "'connect'" in body["message"] and "'consumer'" in body["message"], body
    result = cli(server, "pause", "connect-like")
    assert result.returncode == 1 and "INCONSISTENT_GROUP_PROTOCOL" in result.stderr, result
    assert http(server, "GET", "/v1/groups/connect-like")[1]["paused"] == {"group": False, "topics": []}
    # A group that does not exist yet can be paused (a deployment pauses before starting new code).
    status, body = http(server, "POST", "/v1/groups/not-yet/pause")
    assert status == 200 and body["paused"] == {"group": True, "topics": []}, body
    status, body = http(server, "POST", "/v1/groups/not-yet/pause", [1])
    assert status == 400, body


def test_pause_returns_once_no_member_consumes_and_resume_once_every_member_has_its_partitions(
    members, server, tmp_path
):
    """No waiting for a rebalance in the test: what pause's answer promises is checked right after it returns."""
    group, topic = "pause-effect", "pause-effect-topic"
    ms, placed = consuming_pair(members, server, group, topic, "e", 100, 520, tmp_path)
    generation = http(server, "GET", f"/v1/groups/{group}")[1]["generation"]

    status, answer = http(server, "POST", f"/v1/groups/{group}/pause")
    assert status == 200, answer
    assert answer["in_effect"] is True and answer["members_synced"] == 2, answer
    assert answer["state"] == "Stable" and answer["generation"] > generation, answer
    assert answer["pending_members"] == [] and answer["waited_ms"] >= 0, answer
    during = produce_batch(server, topic, 100, 521, tmp_path)  # at once
    time.sleep(QUIET_S)
    consumed = {(p, o) for m in ms for p, o, _k in m.records()}
    assert not consumed & during.keys(), (
        "records produced after pause returned were consumed\n" + members.describe()
    )

    result = cli(server, "resume", group)
    assert result.returncode == 0, result.stderr
    assert "In effect: 2 members synced generation" in result.stdout, result.stdout
    # Every member already holds its partitions again: the records are consumed without another rebalance.
    after_resume = http(server, "GET", f"/v1/groups/{group}")[1]["generation"]
    placed |= during
    wait_for(lambda: consumed_all(ms, placed), 60, "everything consumed after resume", members.describe)
    assert http(server, "GET", f"/v1/groups/{group}")[1]["generation"] == after_resume

    # ?wait=false answers when the change is recorded; a CLI that cannot wait long enough exits 3 and says why.
    status, answer = http(server, "POST", f"/v1/groups/{group}/pause?wait=false")
    assert status == 200 and "in_effect" not in answer, answer
    result = cli(server, "pause", group, "--timeout", "0")
    if result.returncode == 3:  # the rebalance the first call started is still under way
        assert "Not in effect after" in result.stdout and "still to sync it" in result.stdout, result.stdout
    else:
        assert result.returncode == 0 and "In effect" in result.stdout, result
    status, answer = http(server, "POST", f"/v1/groups/{group}/pause?timeout_ms=-1")
    assert status == 400, answer
    for m in ms:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(ms, placed)


def test_resuming_one_topic_of_a_group_paused_as_a_whole_leaves_the_others_paused(members, server, tmp_path):
    group, orders, audit = "pause-but", "pb-orders", "pb-audit"
    for topic in (orders, audit):
        create_topic(server, topic, PARTITIONS)
    settings = {**CLIENT, "partition.assignment.strategy": "range", "enable.auto.commit": "true"}
    ms = [
        start_member(members, f"b{i}", server, group, "^pb-(orders|audit)$", settings, commit="none")
        for i in range(2)
    ]
    batch1 = produce_batch(server, orders, 30, 530, tmp_path) | produce_batch(
        server, audit, 30, 531, tmp_path
    )
    wait_for(lambda: consumed_keys(ms) >= keys(batch1), 60, "batch 1 of both topics", members.describe)
    wait_settled(server, group, members)

    status, answer = http(server, "POST", f"/v1/groups/{group}/pause")
    assert status == 200 and answer["in_effect"], answer
    held_orders = produce_batch(server, orders, 30, 532, tmp_path)
    held_audit = produce_batch(server, audit, 30, 533, tmp_path)
    time.sleep(QUIET_S)
    assert not consumed_keys(ms) & keys(held_orders | held_audit), members.describe()

    result = cli(server, "resume", group, "--topic", audit)
    assert result.returncode == 0, result.stderr
    assert f"Paused: the whole group but {audit}" in result.stdout, result.stdout
    described = http(server, "GET", f"/v1/groups/{group}")[1]
    assert described["paused"] == {"group": True, "topics": [], "resumed_topics": [audit]}, described
    wait_for(
        lambda: consumed_keys(ms) >= keys(held_audit), 60, "the resumed topic consumed", members.describe
    )
    time.sleep(QUIET_S)
    assert not consumed_keys(ms) & keys(held_orders), (
        "the topic still paused was consumed\n" + members.describe()
    )

    result = cli(server, "resume", group)
    assert result.returncode == 0 and "Paused: -" in result.stdout, result
    wait_for(lambda: consumed_keys(ms) >= keys(held_orders), 60, "everything consumed", members.describe)
    for m in ms:
        assert m.close() == 0, members.describe([m])
