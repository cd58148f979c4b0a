"""The consumer group protocol (KIP-848, `group.protocol=consumer`) with librdkafka (confluent-kafka 2.16):
the server assigns, members reconcile one heartbeat at a time. An even split with every record consumed once
while members join and leave, a static member that closes and comes back to its partitions with nobody else
disturbed, a second process with an instance id in use refused (fatal UNRELEASED_INSTANCE_ID, as Kafka), and a
regular-expression subscription that picks up a topic created later."""

from __future__ import annotations

import time

import pytest

from tests.support.members import (
    RD_FATAL,
    check_exactly_once,
    commit_errors,
    committed_offsets,
    consumed_all,
    create_topic,
    group_type,
    produce_batch,
    regex_subscription,
    rolling_migration,
    wait_for,
    wait_ready,
    wait_split,
)

pytestmark = pytest.mark.e2e

UNRELEASED_INSTANCE_ID = 111
PARTITIONS = 6
# Kafka's minimums (5 s heartbeats, 45 s sessions) make every reconciliation step slow; the server lets them go
# lower, as a user of a coordinator-only server may.
SERVER = {
    "group.consumer.min.heartbeat.interval.ms": 300,
    "group.consumer.heartbeat.interval.ms": 300,
    "group.consumer.min.session.timeout.ms": 6000,
    "group.consumer.session.timeout.ms": 10000,
}
CONSUMER = {"group.protocol": "consumer"}


@pytest.fixture
def server(server_factory):
    return server_factory(SERVER)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_split_evenly_and_leave_with_every_record_consumed_once(
    members, server, tmp_path, assignor
):
    group, topic = f"kip848-{assignor}", f"kip848-{assignor}-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 300, 848, tmp_path, partitions=PARTITIONS)
    settings = {**CONSUMER, "group.remote.assignor": assignor}
    ms = [members.start("ck", "c0", server, group, topic, settings=settings)]
    wait_split(members, ms, PARTITIONS, [6], timeout=30, stable_for=0)
    ms += [members.start("ck", f"c{i}", server, group, topic, settings=settings) for i in (1, 2)]
    wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=40)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)

    assert ms[2].close() == 0, members.describe([ms[2]])  # leaves the group (epoch -1)
    placed |= produce_batch(server, topic, 300, 849, tmp_path, partitions=PARTITIONS)
    wait_split(members, ms[:2], PARTITIONS, [3, 3], timeout=30)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 2 consumed", members.describe)
    for m in ms[:2]:
        assert m.close() == 0, members.describe([m])
    assert not commit_errors(ms), members.describe()
    assert not [e for m in ms for e in m.errors()], members.describe()
    check_exactly_once(ms, placed)


def test_static_member_closes_and_comes_back_to_its_partitions(members, server, tmp_path):
    group, topic = "kip848-static", "kip848-static-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 200, 850, tmp_path, partitions=PARTITIONS)
    ms = [
        members.start("ck", f"s{i}", server, group, topic, instance_id=f"kip848-i{i}", settings=CONSUMER)
        for i in range(2)
    ]
    split = wait_split(members, ms, PARTITIONS, [3, 3], timeout=40)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)
    stayer, leaver = ms
    seen = len(stayer.rebalance_events())

    assert leaver.close() == 0, members.describe([leaver])  # a static member leaves with epoch -2
    back = members.start("ck", "s1-again", server, group, topic, instance_id="kip848-i1", settings=CONSUMER)
    wait_for(lambda: back.held(), 20, "the static member back with its partitions", members.describe)
    assert back.held() == split["s1"], members.describe()
    placed |= produce_batch(server, topic, 200, 851, tmp_path, partitions=PARTITIONS)
    everyone = [*ms, back]
    wait_for(lambda: consumed_all(everyone, placed), 30, "batch 2 consumed", members.describe)
    time.sleep(1.0)  # a few heartbeats: any reassignment would show by now
    assert stayer.rebalance_events()[seen:] == [], members.describe([stayer])
    assert stayer.held() == split["s0"]
    for m in (stayer, back):
        assert m.close() == 0, members.describe([m])
    check_exactly_once(everyone, placed)


def test_instance_id_in_use_is_refused(members, server, tmp_path):
    group, topic = "kip848-fence", "kip848-fence-topic"
    create_topic(server, topic, PARTITIONS)
    a = members.start("ck", "a", server, group, topic, instance_id="kip848-dup", settings=CONSUMER)
    wait_split(members, [a], PARTITIONS, [6], timeout=30, stable_for=0)
    b = members.start("ck", "b", server, group, topic, instance_id="kip848-dup", settings=CONSUMER)

    def refused() -> list[dict]:
        return [
            e
            for e in b.events("error")
            if e["code"] in (UNRELEASED_INSTANCE_ID, RD_FATAL)
            and "instance" in (e["name"] + e["str"]).lower()
        ]

    wait_for(refused, 20, "the second process to be refused its instance id", members.describe)
    wait_for(lambda: not b.alive(), 20, "the refused member to exit", members.describe)
    assert b.held() == frozenset(), members.describe([b])
    assert a.held() == frozenset(range(PARTITIONS)) and a.alive(), members.describe([a])
    assert a.close() == 0, members.describe([a])


def test_regex_subscription_picks_up_a_topic_created_later(members, server, tmp_path):
    group = "kip848-regex"
    regex_subscription(
        members,
        server,
        tmp_path,
        group,
        "rx",
        852,
        lambda pattern: members.start("ck", "rx", server, group, pattern, settings=CONSUMER),
    )


def test_consumer_groups_in_the_admin_api_cli_and_metrics(members, server, tmp_path):
    from tests.e2e.observability.obs_support import get_json, metrics, value
    from tests.support.server import PYTHON, REPO

    group, topic = "kip848-obs", "kip848-obs-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 60, 855, tmp_path, partitions=PARTITIONS)
    ms = [members.start("ck", f"o{i}", server, group, topic, settings=CONSUMER) for i in range(2)]
    split = wait_split(members, ms, PARTITIONS, [3, 3], timeout=30)
    wait_for(lambda: consumed_all(ms, placed), 30, "everything consumed", members.describe)

    status, listed = get_json(server, "/v1/groups")
    assert status == 200, listed
    (entry,) = [g for g in listed["groups"] if g["group_id"] == group]
    assert (entry["type"], entry["state"], entry["members"], entry["protocol_type"]) == (
        "consumer",
        "Stable",
        2,
        "consumer",
    ), entry
    status, described = get_json(server, f"/v1/groups/{group}")
    assert status == 200, described
    assert described["type"] == "consumer" and described["group_epoch"] == described["assignment_epoch"]
    held = {frozenset(p for a in m["assignment"] for p in a["partitions"]) for m in described["members"]}
    assert held == set(split.values()), described
    assert all(m["member_state"] == "STABLE" for m in described["members"]), described

    samples = metrics(server)
    assert value(samples, "kafka_consumergroup_members", consumergroup=group) == 2
    assert (
        value(samples, "kafka_consumergroup_state", consumergroup=group, state="Stable", protocol="consumer")
        == 1
    )
    stable = samples["kafka_server_group_coordinator_metrics_consumer_group_count"]
    assert sum(v for labels, v in stable if labels["state"] == "Stable") >= 1  # summed over the workers
    wait_for(
        lambda: value(metrics(server), "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 0,
        20,
        "the group's lag to be 0",
        members.describe,
    )
    import subprocess

    shown = subprocess.run(
        [PYTHON, "-m", "coordinator", "groups", "--admin", server.admin_url, "describe", group],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert shown.returncode == 0 and group in shown.stdout and "consumer" in shown.stdout, shown
    status, refused = get_json(server, f"/v1/groups/{group}/reset-offsets", "POST", {"to": "earliest"})
    assert status == 409 and refused["error"] == "NON_EMPTY_GROUP", refused
    for m in ms:
        assert m.close() == 0, members.describe([m])
    # Empty now: an administrator's reset is an epoch -1 commit, which a consumer group without members takes
    status, done = get_json(server, f"/v1/groups/{group}/reset-offsets", "POST", {"to": "earliest"})
    assert status == 200, done
    assert committed_offsets(server, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 0)


def test_a_static_member_offline_across_a_coordinator_restart_keeps_its_place(
    members, server_factory, tmp_path
):
    """The registration window's offline marks are written: the coordinator restarts while a killed static member
    is offline, the member is still offline after the restart (its window goes on, no session timer runs out), and
    its instance started again gets its partitions back with no group epoch bump."""
    server = server_factory({**SERVER, "group.static.registration.timeout.ms": 60000})
    group, topic = "kip848-window-restart", "kip848-window-restart-topic"
    create_topic(server, topic, PARTITIONS)
    ms = [
        members.start("ck", f"o{i}", server, group, topic, instance_id=f"{group}-{i}", settings=CONSUMER)
        for i in range(2)
    ]
    split = wait_split(members, ms, PARTITIONS, [3, 3], timeout=40)
    stayer, victim = ms
    epoch = _group_epoch(server, group)
    victim.kill()
    wait_for(
        lambda: _described(server, group)["offline_members"] == [f"{group}-1"],
        SERVER["group.consumer.session.timeout.ms"] / 1000 + 10,
        "o1 to be marked offline",
        members.describe,
    )
    server = server_factory.restart_on_same_port(server)
    wait_ready(server)
    assert _described(server, group)["offline_members"] == [
        f"{group}-1"
    ]  # offline still, not a session again
    time.sleep(SERVER["group.consumer.session.timeout.ms"] / 1000 + 2)
    after = _described(server, group)
    assert after["offline_members"] == [f"{group}-1"] and _group_epoch(server, group) == epoch, after
    placed = produce_batch(server, topic, 60, 858, tmp_path, partitions=PARTITIONS)
    back = members.start("ck", "o1-again", server, group, topic, instance_id=f"{group}-1", settings=CONSUMER)
    wait_for(lambda: back.held(), 30, "the static member back with its partitions", members.describe)
    assert back.held() == split["o1"], members.describe()
    wait_for(lambda: consumed_all([stayer, back], placed), 30, "the batch consumed", members.describe)
    assert _group_epoch(server, group) == epoch and _described(server, group)["offline_members"] == []
    assert stayer.held() == split["o0"], members.describe([stayer])
    for m in (stayer, back):
        assert m.close() == 0, members.describe([m])


def _described(server, group: str) -> dict:
    from tests.e2e.observability.obs_support import get_json

    status, described = get_json(server, f"/v1/groups/{group}")
    assert status == 200, described
    return described


def _group_epoch(server, group: str) -> int:
    return int(_described(server, group)["group_epoch"])


def test_the_group_survives_a_coordinator_restart_without_a_rebalance(members, server_factory, tmp_path):
    """The group's records are replayed at start: after a restart the members go on with their epochs and
    partitions (no revocation, no new assignment), and every record is consumed exactly once."""
    server = server_factory(SERVER)
    group, topic = "kip848-restart", "kip848-restart-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 120, 856, tmp_path, partitions=PARTITIONS)
    ms = [members.start("ck", f"r{i}", server, group, topic, settings=CONSUMER) for i in range(2)]
    split = wait_split(members, ms, PARTITIONS, [3, 3], timeout=30)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)
    seen = {m.name: len(m.rebalance_events()) for m in ms}

    server = server_factory.restart_on_same_port(server)
    placed |= produce_batch(server, topic, 120, 857, tmp_path, partitions=PARTITIONS)
    wait_for(lambda: consumed_all(ms, placed), 60, "batch 2 consumed after the restart", members.describe)
    time.sleep(2.0)  # several heartbeats on the restarted server
    for m in ms:
        assert m.rebalance_events()[seen[m.name] :] == [], members.describe([m])
        assert m.held() == split[m.name]
    assert not commit_errors(ms), members.describe()
    for m in ms:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(ms, placed)


CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_rolling_upgrade_from_classic_to_consumer_and_back(members, server, tmp_path, strategy):
    """Kafka's consumer_protocol_migration_test (rolling upgrade, then rolling downgrade) with eager (range) and
    cooperative classic members: classic members inside a consumer group are served through JoinGroup/SyncGroup,
    the group changes type under them, and every record is consumed exactly once."""
    group, topic = f"kip848-roll-{strategy}", f"kip848-roll-{strategy}-topic"
    create_topic(server, topic, PARTITIONS)
    classic = {**CLASSIC, "partition.assignment.strategy": strategy}
    rolling_migration(
        members,
        server,
        tmp_path,
        group,
        topic,
        PARTITIONS,
        860 if strategy == "range" else 870,
        lambda name: members.start("ck", name, server, group, topic, settings=classic),
        lambda name: members.start("ck", name, server, group, topic, settings=CONSUMER),
    )


def test_classic_static_member_in_place_of_the_last_consumer_protocol_member(members, server, tmp_path):
    """Kafka's downgrade by static replacement: a static consumer-protocol member closes, and a classic member with
    its instance id takes its place; the group becomes a classic group at once, the newcomer holds the partitions
    of the member it replaced, and the classic member already there is not disturbed."""
    group, topic = "kip848-swap", "kip848-swap-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 120, 880, tmp_path, partitions=PARTITIONS)
    old = members.start("ck", "old", server, group, topic, instance_id="kip848-swap-i", settings=CONSUMER)
    wait_split(members, [old], PARTITIONS, [PARTITIONS], timeout=30, stable_for=0)
    classic = {**CLASSIC, "partition.assignment.strategy": "range"}
    stayer = members.start("ck", "stayer", server, group, topic, settings=classic)
    split = wait_split(members, [old, stayer], PARTITIONS, [3, 3], timeout=40)
    wait_for(lambda: consumed_all([old, stayer], placed), 30, "batch 1 consumed", members.describe)
    assert group_type(server, group) == "consumer"
    seen = len(stayer.rebalance_events())

    assert old.close() == 0, members.describe([old])  # a static member leaves with epoch -2
    new = members.start("ck", "new", server, group, topic, instance_id="kip848-swap-i", settings=classic)
    wait_for(
        lambda: new.held(), 20, "the classic member to hold the partitions it took over", members.describe
    )
    assert new.held() == split["old"], members.describe()
    assert group_type(server, group) == "classic"
    placed |= produce_batch(server, topic, 120, 881, tmp_path, partitions=PARTITIONS)
    everyone = [old, stayer, new]
    wait_for(lambda: consumed_all(everyone, placed), 30, "batch 2 consumed", members.describe)
    time.sleep(1.0)  # a few heartbeats: a rebalance would show by now
    assert stayer.rebalance_events()[seen:] == [], members.describe([stayer])
    for m in (stayer, new):
        assert m.close() == 0, members.describe([m])
    assert not commit_errors(everyone), members.describe()
    check_exactly_once(everyone, placed)


def test_registration_window_keeps_a_killed_static_members_partitions(members, server_factory, tmp_path):
    """Our registration window for consumer groups: a static member whose process dies keeps its partitions past
    its session timeout (nobody else takes them), and its instance started again gets them back with no rebalance
    of the others."""
    server = server_factory({**SERVER, "group.static.registration.timeout.ms": 60000})
    group, topic = "kip848-window", "kip848-window-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 60, 890, tmp_path, partitions=PARTITIONS)
    ms = [
        members.start("ck", f"w{i}", server, group, topic, instance_id=f"kip848-w{i}", settings=CONSUMER)
        for i in range(2)
    ]
    split = wait_split(members, ms, PARTITIONS, [3, 3], timeout=40)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)
    stayer, victim = ms
    seen = len(stayer.rebalance_events())
    victim.kill()
    time.sleep(SERVER["group.consumer.session.timeout.ms"] / 1000 + 3)  # its session has expired by now
    assert stayer.rebalance_events()[seen:] == [] and stayer.held() == split["w0"], members.describe([stayer])
    back = members.start("ck", "w1-again", server, group, topic, instance_id="kip848-w1", settings=CONSUMER)
    wait_for(lambda: back.held(), 20, "the static member back with its partitions", members.describe)
    assert back.held() == split["w1"], members.describe()
    placed |= produce_batch(server, topic, 60, 891, tmp_path, partitions=PARTITIONS)
    everyone = [*ms, back]
    wait_for(lambda: consumed_all(everyone, placed), 30, "batch 2 consumed", members.describe)
    assert stayer.rebalance_events()[seen:] == [], members.describe([stayer])
    for m in (stayer, back):
        assert m.close() == 0, members.describe([m])
