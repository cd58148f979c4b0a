"""The Apache Kafka Java consumer (kafka-clients 3.9.x and 4.x, classic group protocol) in groups on the
server: an even split and exactly-once consumption with commitSync, a leaving member's partitions moving to
the others, static membership (a restart within the session timeout keeps the partitions without a
rebalance) and fencing of a duplicate group.instance.id (FencedInstanceIdException)."""

from __future__ import annotations

import time

import pytest
from compat_matrix import JAVA_SETS, not_applicable

from tests.support.java import start_java_member
from tests.support.members import (
    check_exactly_once,
    commit_errors,
    committed_offsets,
    consumed_all,
    create_topic,
    high_watermarks,
    produce_batch,
    regex_subscription,
    rolling_migration,
    wait_for,
    wait_split,
)

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SESSION_MS = 20000
# A short heartbeat interval: the Java client learns of a rebalance from its heartbeat.
DYNAMIC = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500}
STATIC = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1000}
QUIET_S = 3.0


def check_version(member, java_clients) -> None:
    started = wait_for(lambda: member.events("started"), 30, f"{member.name} to start", member.summary)
    assert started[0]["client_version"] == java_clients.version, started


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_java_members_split_consume_exactly_once_and_take_over_a_leaver(
    members, server, tmp_path, java_clients, assignor
):
    group, topic = (
        f"java-{java_clients.set_name}-{assignor}",
        f"java-split-{java_clients.set_name}-{assignor}",
    )
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 600, 500, tmp_path)
    ms = [
        start_java_member(
            members, java_clients, f"j{i}", server, group, topic, assignor=assignor, settings=DYNAMIC
        )
        for i in range(3)
    ]
    check_version(ms[0], java_clients)
    wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=60)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)

    # A dynamic member closing sends LeaveGroup: its partitions move at once, not after the session timeout.
    leaver, stay = ms[2], ms[:2]
    t_leave = time.monotonic()
    assert leaver.close() == 0, members.describe([leaver])
    wait_split(members, stay, PARTITIONS, [3, 3], timeout=SESSION_MS / 1000 - 5)
    took = time.monotonic() - t_leave
    print(f"{java_clients.set_name}/{assignor}: partitions of the leaver moved in {took:.2f}s")
    assert took < SESSION_MS / 1000 - 5

    batch2 = produce_batch(server, topic, 300, 501, tmp_path)
    placed |= batch2
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 2 consumed", members.describe)
    errs = commit_errors(ms)
    # A commit racing the leaver's rebalance may fail (it is retried by reprocessing nothing: the next poll's
    # commit covers it); none is expected once the group is stable, so check the final committed offsets.
    hw = high_watermarks(placed, PARTITIONS)
    wait_for(
        lambda: committed_offsets(server, group, topic, PARTITIONS) == hw,
        15,
        f"committed offsets to reach the high watermarks {hw} (commit errors: {errs})",
        members.describe,
    )
    for m in stay:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(ms, placed)
    assert not [e for m in ms for e in m.events("error")], members.describe()


def test_java_static_member_restart_keeps_partitions_without_rebalance(
    members, server, tmp_path, java_clients
):
    group, topic = f"java-static-{java_clients.set_name}", f"java-static-{java_clients.set_name}-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 300, 510, tmp_path)
    ms = []
    for i in range(3):
        ms.append(
            start_java_member(
                members,
                java_clients,
                f"s{i}",
                server,
                group,
                topic,
                instance_id=f"{group}-instance-{i}",
                settings=STATIC,
            )
        )
        if i == 0:  # let the first one become the leader
            wait_split(members, ms, PARTITIONS, [6], timeout=40, stable_for=0)
    split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=60)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)

    victim, others = ms[2], ms[:2]
    seen = {m.name: len(m.rebalance_events()) for m in others}
    t_gone = time.time()
    assert victim.close() == 0, members.describe(
        [victim]
    )  # a static Java member sends no LeaveGroup on close
    back = start_java_member(
        members,
        java_clients,
        "s2-again",
        server,
        group,
        topic,
        instance_id=f"{group}-instance-2",
        settings=STATIC,
    )
    wait_for(
        lambda: back.held(), SESSION_MS / 1000, "the restarted static member to be assigned", members.describe
    )
    took = back.events("assigned")[0]["t"] - t_gone
    print(f"{java_clients.set_name}: static member back with its partitions {took:.2f}s after it went away")
    assert back.held() == split[victim.name], (
        f"restarted static member got {sorted(back.held())}, had {sorted(split[victim.name])}\n"
        + members.describe()
    )

    batch2 = produce_batch(server, topic, 300, 511, tmp_path)
    placed |= batch2
    everyone = [*ms, back]
    wait_for(lambda: consumed_all(everyone, placed), 30, "batch 2 consumed", members.describe)
    time.sleep(max(0.0, QUIET_S - (time.time() - back.events("assigned")[0]["t"])))
    for m in others:
        new = m.rebalance_events()[seen[m.name] :]
        assert new == [], (
            f"{m.name} saw rebalance callbacks while a static member restarted: {new}\n" + members.describe()
        )
        assert m.held() == split[m.name]
    assert len(back.events("assigned")) == 1, back.summary()
    for m in [*others, back]:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(everyone, placed)
    assert not commit_errors(everyone), members.describe()


def test_java_duplicate_instance_id_fences_the_older_member(members, server, java_clients):
    group, topic = f"java-fence-{java_clients.set_name}", f"java-fence-{java_clients.set_name}-topic"
    create_topic(server, topic, PARTITIONS)
    a = start_java_member(
        members, java_clients, "a", server, group, topic, instance_id="fence-a", settings=STATIC
    )
    wait_split(members, [a], PARTITIONS, [6], timeout=40, stable_for=0)
    b = start_java_member(
        members, java_clients, "b", server, group, topic, instance_id="fence-b", settings=STATIC
    )
    split = wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=60)
    seen_b = len(b.rebalance_events())

    a2 = start_java_member(
        members, java_clients, "a2", server, group, topic, instance_id="fence-a", settings=STATIC
    )
    wait_for(lambda: a2.held(), 30, "the new process with a's instance id to be assigned", members.describe)
    assert a2.held() == split["a"], members.describe()

    def fenced() -> list[dict]:
        return [e for e in a.events("error") if e["name"] == "FencedInstanceIdException"]

    errs = wait_for(fenced, 20, "the older member to get a FencedInstanceIdException", members.describe)
    print(f"{java_clients.set_name}: fenced member reported: {errs[0]}")
    wait_for(lambda: not a.alive(), 20, "the fenced member's process to close and exit", members.describe)
    assert a.proc.returncode == 0, members.describe([a])
    assert not a2.errors(), a2.summary()
    assert b.rebalance_events()[seen_b:] == [] and b.held() == split["b"], members.describe()
    for m in (a2, b):
        assert m.close() == 0, members.describe([m])


# -- the consumer group protocol (KIP-848): kafka-clients 4.x with group.protocol=consumer ----------------------

# The server's heartbeat interval and session timeout apply (the compat server fixture's group.consumer.*); the
# client refuses session.timeout.ms and heartbeat.interval.ms with this protocol.
KIP848 = {"group.protocol": "consumer", "group.remote.assignor": "uniform"}


def kip848_only(java_clients) -> None:
    if not java_clients.set_name.endswith("-4"):
        pytest.skip("the consumer group protocol is GA from kafka-clients 4.0 (early access in 3.9)")


def test_java_consumer_protocol_split_consume_exactly_once_and_take_over_a_leaver(
    members, server, tmp_path, java_clients
):
    kip848_only(java_clients)
    group, topic = "java-848-split", "java-848-split-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 600, 520, tmp_path)
    ms = [
        start_java_member(members, java_clients, f"k{i}", server, group, topic, settings=KIP848)
        for i in range(3)
    ]
    check_version(ms[0], java_clients)
    wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=60)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)
    leaver, stay = ms[2], ms[:2]
    t_leave = time.monotonic()
    assert leaver.close() == 0, members.describe([leaver])  # leaves with epoch -1
    wait_split(members, stay, PARTITIONS, [3, 3], timeout=30)
    print(
        f"{java_clients.set_name}/KIP-848: the leaver's partitions moved in {time.monotonic() - t_leave:.2f}s"
    )
    placed |= produce_batch(server, topic, 300, 521, tmp_path)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 2 consumed", members.describe)
    hw = high_watermarks(placed, PARTITIONS)
    wait_for(
        lambda: committed_offsets(server, group, topic, PARTITIONS) == hw,
        15,
        f"committed offsets to reach {hw}",
        members.describe,
    )
    for m in stay:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(ms, placed)
    assert not [e for m in ms for e in m.events("error")], members.describe()
    assert not commit_errors(ms), members.describe()


def test_java_consumer_protocol_static_member_restart_keeps_partitions(
    members, server, tmp_path, java_clients
):
    kip848_only(java_clients)
    group, topic = "java-848-static", "java-848-static-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 300, 530, tmp_path)
    ms = [
        start_java_member(
            members, java_clients, f"s{i}", server, group, topic, instance_id=f"{group}-{i}", settings=KIP848
        )
        for i in range(3)
    ]
    split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=60)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)
    victim, others = ms[2], ms[:2]
    seen = {m.name: len(m.rebalance_events()) for m in others}
    assert victim.close() == 0, members.describe([victim])  # a static member leaves with epoch -2
    back = start_java_member(
        members, java_clients, "s2-again", server, group, topic, instance_id=f"{group}-2", settings=KIP848
    )
    wait_for(lambda: back.held(), 30, "the restarted static member to be assigned", members.describe)
    assert back.held() == split[victim.name], members.describe()
    placed |= produce_batch(server, topic, 300, 531, tmp_path)
    everyone = [*ms, back]
    wait_for(lambda: consumed_all(everyone, placed), 30, "batch 2 consumed", members.describe)
    time.sleep(QUIET_S)
    for m in others:
        assert m.rebalance_events()[seen[m.name] :] == [], members.describe([m])
        assert m.held() == split[m.name]
    for m in [*others, back]:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(everyone, placed)


def test_java_consumer_protocol_duplicate_instance_id_is_refused(members, server, java_clients):
    kip848_only(java_clients)
    group, topic = "java-848-fence", "java-848-fence-topic"
    create_topic(server, topic, PARTITIONS)
    a = start_java_member(
        members, java_clients, "a", server, group, topic, instance_id="dup", settings=KIP848
    )
    wait_split(members, [a], PARTITIONS, [6], timeout=40, stable_for=0)
    seen = len(a.rebalance_events())
    a2 = start_java_member(
        members, java_clients, "a2", server, group, topic, instance_id="dup", settings=KIP848
    )

    def refused() -> list[dict]:
        return [e for e in a2.events("error") if e["name"] == "UnreleasedInstanceIdException"]

    errs = wait_for(refused, 30, "the duplicate to get an UnreleasedInstanceIdException", members.describe)
    print(f"{java_clients.set_name}/KIP-848: the duplicate reported: {errs[0]}")
    wait_for(lambda: not a2.alive(), 20, "the refused process to close and exit", members.describe)
    assert a2.held() == frozenset(), members.describe([a2])
    assert a.rebalance_events()[seen:] == [] and a.held() == frozenset(range(PARTITIONS)), members.describe()
    assert not a.errors(), a.summary()
    assert a.close() == 0, members.describe([a])


def test_java_consumer_protocol_rolling_upgrade_and_downgrade(
    members, server, tmp_path, java_clients, request
):
    """A live group of classic kafka-clients members is upgraded by replacing them one at a time with
    group.protocol=consumer members, then downgraded the same way (tests/support/members.py rolling_migration)."""
    not_applicable(
        JAVA_SETS[java_clients.set_name],
        "upgrade",
        request,
        "run in the row of kafka-clients 4.x with the consumer group protocol (KIP-848)",
    )
    kip848_only(java_clients)
    group, topic = "java-848-upgrade", "java-848-upgrade-topic"
    create_topic(server, topic, PARTITIONS)
    rolling_migration(
        members,
        server,
        tmp_path,
        group,
        topic,
        PARTITIONS,
        540,
        lambda name: start_java_member(members, java_clients, name, server, group, topic, settings=DYNAMIC),
        lambda name: start_java_member(members, java_clients, name, server, group, topic, settings=KIP848),
    )


def test_java_consumer_protocol_regex_subscription_picks_up_a_later_topic(
    members, server, tmp_path, java_clients, request
):
    """subscribe(SubscriptionPattern): the server resolves the pattern (KIP-848's SubscribedTopicRegex), a
    matching topic created while the member runs is assigned and consumed, another is not
    (tests/support/members.py regex_subscription)."""
    not_applicable(
        JAVA_SETS[java_clients.set_name],
        "regex",
        request,
        "run in the row of kafka-clients 4.x with the consumer group protocol (KIP-848)",
    )
    kip848_only(java_clients)
    group = "java-848-regex"
    regex_subscription(
        members,
        server,
        tmp_path,
        group,
        "java-rx",
        560,
        lambda pattern: start_java_member(
            members, java_clients, "rx", server, group, pattern, settings=KIP848, regex=True
        ),
    )
