"""Static membership (KIP-345) with librdkafka: a static member that goes away without leaving and comes back
within its session timeout gets its partitions back without disturbing anybody; a second process with the same
group.instance.id fences the first (fatal FENCED_INSTANCE_ID)."""

from __future__ import annotations

import time

import pytest

from tests.support.members import (
    FENCED_INSTANCE_ID,
    RD_FATAL,
    RD_FENCED,
    check_exactly_once,
    consumed_all,
    create_topic,
    produce_batch,
    wait_for,
    wait_split,
)

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SESSION_MS = 20000
SETTINGS = {
    "partition.assignment.strategy": "range",
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 1000,
}
# Long enough for the others' heartbeats (every 1 s) to have seen a rebalance, if the server had started one.
QUIET_S = 3.0


@pytest.mark.parametrize(
    "how, victim_index", [("close", 2), ("kill", 0)], ids=["close-member", "kill-leader"]
)
def test_static_member_restart_keeps_partitions_without_rebalance(
    members, server, tmp_path, how, victim_index
):
    # "kill-leader": the first member to join leads the group, so restarting it covers a static leader's return.
    group, topic = f"static-{how}", f"static-{how}-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 300, 400, tmp_path)
    ms = []
    for i in range(3):
        ms.append(
            members.start(
                "ck", f"s{i}", server, group, topic, instance_id=f"{group}-instance-{i}", settings=SETTINGS
            )
        )
        if i == 0:  # let the first one become the leader
            wait_split(members, ms, PARTITIONS, [6], timeout=30, stable_for=0)
    split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=40)
    wait_for(lambda: consumed_all(ms, placed), 30, "batch 1 consumed", members.describe)

    victim = ms[victim_index]
    others = [m for m in ms if m is not victim]
    seen = {m.name: len(m.rebalance_events()) for m in others}
    t_gone = time.time()
    if how == "close":
        assert victim.close() == 0, members.describe(
            [victim]
        )  # a static librdkafka member sends no LeaveGroup
    else:
        victim.kill()
    back = members.start(
        "ck",
        f"{victim.name}-again",
        server,
        group,
        topic,
        instance_id=f"{group}-instance-{victim_index}",
        settings=SETTINGS,
    )
    wait_for(
        lambda: back.held(), SESSION_MS / 1000, "the restarted static member to be assigned", members.describe
    )
    took = back.events("assigned")[0]["t"] - t_gone
    print(f"static member ({how}) back with its partitions {took:.2f}s after it went away")
    assert back.held() == split[victim.name], (
        f"restarted static member got {sorted(back.held())}, had {sorted(split[victim.name])}\n"
        + members.describe()
    )
    assert took < SESSION_MS / 1000

    batch2 = produce_batch(server, topic, 300, 401, tmp_path)
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


def test_duplicate_instance_id_fences_the_older_member(members, server, tmp_path):
    group, topic = "static-fence", "static-fence-topic"
    create_topic(server, topic, PARTITIONS)
    a = members.start("ck", "a", server, group, topic, instance_id="fence-a", settings=SETTINGS)
    wait_split(members, [a], PARTITIONS, [6], timeout=30, stable_for=0)
    b = members.start("ck", "b", server, group, topic, instance_id="fence-b", settings=SETTINGS)
    split = wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=40)
    seen_b = len(b.rebalance_events())

    a2 = members.start("ck", "a2", server, group, topic, instance_id="fence-a", settings=SETTINGS)
    wait_for(lambda: a2.held(), 20, "the new process with a's instance id to be assigned", members.describe)
    assert a2.held() == split["a"], members.describe()

    def fenced() -> list[dict]:
        # librdkafka raises FENCED_INSTANCE_ID as a fatal error; the consumer sees it as a consumer error with
        # code _FATAL whose text names the underlying error (KafkaError.fatal() may or may not be set on it).
        return [
            e
            for e in a.events("error")
            if (e["fatal"] or e["code"] == RD_FATAL)
            and e["code"] in (FENCED_INSTANCE_ID, RD_FENCED, RD_FATAL)
            and ("fenced" in (e["name"] + e["str"]).lower() or e["code"] != RD_FATAL)
        ]

    errs = wait_for(
        fenced, 15, "the older member to report a fatal FENCED_INSTANCE_ID error", members.describe
    )
    print("fenced member reported:", errs[0])
    wait_for(lambda: not a.alive(), 20, "the fenced member's process to close and exit", members.describe)
    assert a.proc.returncode == 0, members.describe([a])
    assert not a2.errors(), a2.summary()
    assert b.rebalance_events()[seen_b:] == [] and b.held() == split["b"], members.describe()
    for m in (a2, b):
        assert m.close() == 0, members.describe([m])
