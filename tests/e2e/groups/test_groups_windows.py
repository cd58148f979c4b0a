"""Static membership windows (issue #5 item 2) with real confluent-kafka (librdkafka) members.

group.static.registration.timeout.ms: a static member killed and back after its session timeout but inside the
window takes its partitions back without a rebalance; one that stays away is removed by exactly one rebalance
when the window ends. group.expansion.timeout.ms: a group scaled from 2 to 6 members inside the window costs one
rebalance. Both windows are set per group through the admin API (PUT /v1/groups/{group}/settings), before the
group exists; the coordinator's rebalance timeline and the clients' rebalance callbacks are compared.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from tests.support.members import admin_http, create_topic, wait_for, wait_ready, wait_split
from tests.support.server import PYTHON, REPO

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SESSION_MS = 6000
REGISTRATION_MS = 20000
EXPANSION_MS = 10000
CLIENT = {
    "partition.assignment.strategy": "range",
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 500,
}
QUIET_S = 3.0


http = admin_http


def timeline(server: Any, group: str) -> list[dict[str, Any]]:
    status, data = http(server, "GET", f"/v1/groups/{group}/timeline")
    assert status == 200, data
    return data["rebalances"]


def describe(server: Any, group: str) -> dict[str, Any]:
    status, data = http(server, "GET", f"/v1/groups/{group}")
    assert status == 200, data
    return data


def set_registration_window(server: Any, group: str, window_ms: int) -> None:
    """The group's own group.static.registration.timeout.ms, set before it exists."""
    wait_ready(server)
    status, answer = http(
        server, "PUT", f"/v1/groups/{group}/settings", {"group.static.registration.timeout.ms": window_ms}
    )
    assert (
        status == 200 and answer["effective_settings"]["group.static.registration.timeout.ms"] == window_ms
    ), answer


def test_registration_window_keeps_a_static_members_place_and_removes_the_absent_in_one_rebalance(
    members, server, tmp_path
):
    group, topic = "window-registration", "window-registration-topic"
    set_registration_window(server, group, REGISTRATION_MS)
    create_topic(server, topic, PARTITIONS)
    ms = []
    for i in range(3):
        ms.append(
            members.start("ck", f"s{i}", server, group, topic, instance_id=f"{group}-{i}", settings=CLIENT)
        )
        if i == 0:
            wait_split(members, ms, PARTITIONS, [6], timeout=30, stable_for=0)
    split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=60, stable_for=QUIET_S)
    rebalances_before = len(timeline(server, group))
    s0, s1, s2 = ms
    callbacks = {m.name: len(m.rebalance_events()) for m in ms}

    # s1 dies and comes back after its session timeout, inside the registration window.
    s1.kill()
    wait_for(
        lambda: describe(server, group)["offline_members"] == [f"{group}-1"],
        SESSION_MS / 1000 + 10,
        "s1 to be marked offline (session expired)",
        members.describe,
    )
    time.sleep(2)
    back = members.start("ck", "s1-again", server, group, topic, instance_id=f"{group}-1", settings=CLIENT)
    wait_for(lambda: back.held(), 30, "the returning static member to be assigned", members.describe)
    assert back.held() == split["s1"], members.describe()
    time.sleep(QUIET_S)
    assert len(timeline(server, group)) == rebalances_before, timeline(server, group)
    for m in (s0, s2):
        assert len(m.rebalance_events()) == callbacks[m.name], members.describe([m])
        assert m.held() == split[m.name]
    assert describe(server, group)["offline_members"] == []

    # s2 dies and stays away: one rebalance when the window ends removes it; s0 and s1 share its partitions.
    s2.kill()
    t_killed = time.monotonic()
    wait_for(
        lambda: describe(server, group)["offline_members"] == [f"{group}-2"],
        SESSION_MS / 1000 + 10,
        "s2 to be marked offline",
        members.describe,
    )
    time.sleep(5)
    assert len(timeline(server, group)) == rebalances_before, "a rebalance inside the registration window"
    split2 = wait_split(
        members, [s0, back], PARTITIONS, [3, 3], timeout=(SESSION_MS + REGISTRATION_MS) / 1000 + 30
    )
    gone_s = time.monotonic() - t_killed
    assert gone_s >= (SESSION_MS + REGISTRATION_MS) / 1000 - 2, f"s2 was removed after only {gone_s:.1f}s"
    time.sleep(QUIET_S)
    new = timeline(server, group)[rebalances_before:]
    assert len(new) == 1, new
    assert new[0]["reason"] == "session_expiry" and new[0]["outcome"] == "stable", new
    assert [m["group_instance_id"] for m in new[0]["members_out"]] == [f"{group}-2"], new
    assert split2["s0"] | split2["s1-again"] == frozenset(range(PARTITIONS))
    for m in (s0, back):
        assert m.close() == 0, members.describe([m])


def test_rolling_restart_of_five_static_members_under_the_registration_window_costs_no_rebalance(
    members, server, tmp_path
):
    """The issue's rolling restart: 5 static members with session.timeout.ms=6000, each down for 10 s (longer
    than its session) under a 60 s registration timeout: zero rebalances, by the coordinator's timeline and by
    the clients' rebalance callbacks alike."""
    group, topic = "window-rolling", "window-rolling-topic"
    set_registration_window(server, group, 60000)
    create_topic(server, topic, 10)
    ms = []
    for i in range(5):
        ms.append(
            members.start("ck", f"r{i}", server, group, topic, instance_id=f"{group}-{i}", settings=CLIENT)
        )
        if i == 0:
            wait_split(members, ms, 10, [10], timeout=30, stable_for=0)
    split = wait_split(members, ms, 10, [2] * 5, timeout=90, stable_for=QUIET_S)
    rebalances_before = len(timeline(server, group))
    seen = {m.name: len(m.rebalance_events()) for m in ms}
    current = list(ms)
    for i in range(5):
        for m in ms[i:]:  # the originals still running saw no callback since the group settled
            assert len(m.rebalance_events()) == seen[m.name], members.describe([m])
        current[i].kill()
        time.sleep(10)
        assert describe(server, group)["offline_members"] == [f"{group}-{i}"], members.describe()
        current[i] = members.start(
            "ck", f"r{i}-again", server, group, topic, instance_id=f"{group}-{i}", settings=CLIENT
        )
        wait_for(lambda: current[i].held(), 30, f"r{i} to be back with its partitions", members.describe)
        assert current[i].held() == split[f"r{i}"], members.describe()
    time.sleep(QUIET_S)
    assert timeline(server, group)[rebalances_before:] == []
    for m in current:
        # Each process saw exactly one callback: its own initial assignment (no revocation, no reassignment).
        assert [e["ev"] for e in m.rebalance_events()] == ["assigned"], members.describe([m])
    assert describe(server, group)["offline_members"] == []
    for m in current:
        assert m.close() == 0, members.describe([m])


def test_expansion_window_admits_four_new_members_in_one_rebalance(members, server, tmp_path):
    group, topic = "window-expansion", "window-expansion-topic"
    wait_ready(server)
    status, answer = http(
        server, "PUT", f"/v1/groups/{group}/settings", {"group.expansion.timeout.ms": EXPANSION_MS}
    )
    assert status == 200, answer
    create_topic(server, topic, PARTITIONS)
    first = [members.start("ck", f"e{i}", server, group, topic, settings=CLIENT) for i in range(2)]
    wait_split(members, first, PARTITIONS, [3, 3], timeout=60, stable_for=QUIET_S)
    rebalances_before = len(timeline(server, group))
    callbacks = {m.name: len(m.rebalance_events()) for m in first}

    t0 = time.monotonic()
    more = [members.start("ck", f"e{i}", server, group, topic, settings=CLIENT) for i in range(2, 6)]
    wait_for(
        lambda: len(describe(server, group)["held_back_joiners"]) == 4,
        EXPANSION_MS / 1000,
        "the four new members to be held back",
        members.describe,
    )
    assert describe(server, group)["state"] == "Stable"
    everyone = first + more
    wait_split(members, everyone, PARTITIONS, [1] * 6, timeout=EXPANSION_MS / 1000 + 60, stable_for=QUIET_S)
    took = time.monotonic() - t0
    new = timeline(server, group)[rebalances_before:]
    assert len(new) == 1, new
    assert new[0]["reason"] == "new_member" and new[0]["outcome"] == "stable", new
    assert took >= EXPANSION_MS / 1000 - 1, f"the new members were admitted after only {took:.1f}s"
    for m in first:
        # One rebalance: eager range revokes everything once and assigns once.
        assert len(m.rebalance_events()) - callbacks[m.name] == 2, members.describe([m])
    # The groups CLI shows and changes the group's own settings.
    groups_cli = [PYTHON, "-m", "coordinator", "groups", "--admin", server.admin_url, "settings", group]
    shown = subprocess.run(groups_cli, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown
    assert [line.split() for line in shown.stdout.splitlines() if line.startswith("group.")] == [
        ["group.expansion.timeout.ms", str(EXPANSION_MS), "group"],
        ["group.static.registration.timeout.ms", "0", "server"],
    ], shown.stdout
    changed = subprocess.run(
        [*groups_cli, "--unset", "group.expansion.timeout.ms", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert changed.returncode == 0, changed
    assert json.loads(changed.stdout)["settings"] == {}, changed.stdout
    for m in everyone:
        assert m.close() == 0, members.describe([m])


def test_a_static_member_offline_across_a_coordinator_restart_keeps_its_place(members, server_factory):
    """The offline marks are durable: the coordinator restarts while a member is inside its registration window,
    and the member comes back to its partitions after the restart without a rebalance."""
    server = server_factory()
    group, topic = "window-restart", "window-restart-topic"
    set_registration_window(server, group, 60000)
    create_topic(server, topic, 4)
    s0 = members.start("ck", "r0", server, group, topic, instance_id=f"{group}-0", settings=CLIENT)
    wait_split(members, [s0], 4, [4], timeout=30, stable_for=0)
    s1 = members.start("ck", "r1", server, group, topic, instance_id=f"{group}-1", settings=CLIENT)
    split = wait_split(members, [s0, s1], 4, [2, 2], timeout=60, stable_for=QUIET_S)
    generation = describe(server, group)["generation"]

    s1.kill()
    wait_for(
        lambda: describe(server, group)["offline_members"] == [f"{group}-1"],
        SESSION_MS / 1000 + 10,
        "r1 to be marked offline",
        members.describe,
    )
    server = server_factory.restart_on_same_port(server)
    wait_ready(server)
    after = describe(server, group)
    assert after["offline_members"] == [f"{group}-1"], after  # not reset by the restart
    assert after["generation"] == generation, after

    back = members.start("ck", "r1-again", server, group, topic, instance_id=f"{group}-1", settings=CLIENT)
    wait_for(lambda: back.held(), 30, "the returning static member to be assigned", members.describe)
    assert back.held() == split["r1"], members.describe()
    time.sleep(QUIET_S)
    after = describe(server, group)
    assert after["generation"] == generation and after["offline_members"] == [], after
    assert s0.held() == split["r0"], members.describe([s0])
    for m in (s0, back):
        assert m.close() == 0, members.describe([m])
