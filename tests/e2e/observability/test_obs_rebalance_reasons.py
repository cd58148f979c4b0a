"""Each way real clients make a group rebalance is counted under its reason and shows in the /v1 timeline.

Members are confluent-kafka (librdkafka) consumers in their own processes, with short timeouts (session 3 s,
max.poll.interval.ms 5 s, which librdkafka sends as the rebalance timeout). What the server can know decides the
category: librdkafka sends no KIP-800 reasons (LeaveGroup v1, JoinGroup v5), so a member that stalls in its poll
loop and leaves by itself ("Application maximum poll interval exceeded: leaving group") is a `leave`; a member
stuck in its rebalance callback is evicted by the coordinator when the rebalance timeout runs out, which is a
`rebalance_timeout` member expiration. The KIP-800 text itself is shown with the raw wire client, sending the
Java consumer's exact LeaveGroup v5 reason.
"""

from __future__ import annotations

import time

import pytest
from obs_support import get_json, metrics, produce, value, wait_until

from tests.support.wire import WireClient, join_group, make, request_class, sync_alone

pytestmark = pytest.mark.e2e

FAST = [
    "--set",
    "session.timeout.ms=3000",
    "--set",
    "heartbeat.interval.ms=500",
    "--set",
    "max.poll.interval.ms=5000",
]
SETTINGS = {"group.min.session.timeout.ms": 1000, "metrics.lag.sample.interval.ms": 500}
TOPIC = "obs-reasons"


def timeline(server, group: str) -> list[dict]:
    status, body = get_json(server, f"/v1/groups/{group}/timeline")
    return body["rebalances"] if status == 200 else []


def rebalances(server, group: str, reason: str) -> float:
    return (
        value(metrics(server), "kafka_consumergroup_rebalances_total", consumergroup=group, reason=reason)
        or 0
    )


def stable(server, group: str, members: int) -> bool:
    status, body = get_json(server, f"/v1/groups/{group}")
    return status == 200 and body["state"] == "Stable" and len(body["members"]) == members


def stable_pair(server, members, group: str, *extra: str):
    """Two members, a then b, in a Stable group; returns them once both have their assignment."""
    a = members.start(f"{group}-a", server, group, TOPIC, *FAST, *extra)
    wait_until(lambda: stable(server, group, 1), 30, f"{group}: a alone and Stable", members.describe)
    b = members.start(f"{group}-b", server, group, TOPIC, *FAST, *extra)
    wait_until(lambda: stable(server, group, 2), 30, f"{group}: a and b Stable", members.describe)
    return a, b


def last_with(server, group: str, reason: str, explain) -> dict:
    def find() -> dict | None:
        done = [r for r in timeline(server, group) if r["reason"] == reason and r["outcome"] != "in_progress"]
        return done[-1] if done else None

    return wait_until(find, 30, f"{group}: a finished `{reason}` rebalance in the timeline", explain)


@pytest.fixture
def server(server_factory):
    server = server_factory(SETTINGS)
    produce(server, TOPIC, 2, 5)
    return server


def test_a_member_joins(server, members):
    group = "reason-join"
    a, b = stable_pair(server, members, group)
    entry = last_with(server, group, "new_member", members.describe)
    assert entry["triggered_by"]["client_id"] == f"{group}-b"
    assert [m["client_id"] for m in entry["members_in"]] == [f"{group}-b"]
    assert entry["members_out"] == [] and entry["outcome"] == "stable" and entry["members"] == 2
    assert rebalances(server, group, "new_member") == 2  # a's first join, then b's
    first = timeline(server, group)[0]
    assert first["reason"] == "new_member" and first["triggered_by"]["client_id"] == f"{group}-a"


def test_a_member_leaves(server, members):
    group = "reason-leave"
    a, b = stable_pair(server, members, group)
    b.close()
    entry = last_with(server, group, "leave", members.describe)
    assert entry["triggered_by"]["client_id"] == f"{group}-b"
    assert [(m["client_id"], m["cause"]) for m in entry["members_out"]] == [(f"{group}-b", "left")]
    assert entry["members"] == 1 and entry["outcome"] == "stable"
    assert rebalances(server, group, "leave") == 1


def test_a_member_is_killed(server, members):
    group = "reason-kill"
    a, b = stable_pair(server, members, group)
    b.kill()  # SIGKILL: no LeaveGroup; the session (3 s) has to run out
    entry = last_with(server, group, "session_expiry", members.describe)
    assert entry["triggered_by"]["client_id"] == f"{group}-b"
    assert [(m["client_id"], m["cause"]) for m in entry["members_out"]] == [(f"{group}-b", "session_timeout")]
    samples = metrics(server)
    assert (
        value(samples, "kafka_consumergroup_rebalances_total", consumergroup=group, reason="session_expiry")
        == 1
    )
    assert (
        value(
            samples,
            "kafka_consumergroup_member_expirations_total",
            consumergroup=group,
            cause="session_timeout",
        )
        == 1
    )


def test_a_member_stalls_past_max_poll_interval(server, members):
    # In the poll loop: librdkafka leaves the group itself once max.poll.interval.ms has passed.
    group = "reason-stall"
    a, b = stable_pair(server, members, group)
    b.send("stall 6")
    entry = last_with(server, group, "leave", members.describe)
    assert entry["triggered_by"]["client_id"] == f"{group}-b"
    assert entry["client_reason"] is None  # librdkafka's LeaveGroup v1 carries no reason
    wait_until(
        lambda: any(e["name"] == "_MAX_POLL_EXCEEDED" for e in b.events("error")),
        30,
        "librdkafka to report the poll interval it exceeded",
        members.describe,
    )
    # Once it polls again it rejoins as a new member.
    wait_until(lambda: stable(server, group, 2), 30, "b back in the group", members.describe)
    assert rebalances(server, group, "leave") == 1

    # Stuck in the revocation callback during a rebalance: it never rejoins, and the coordinator ends the join
    # phase without it when the rebalance timeout (its max.poll.interval.ms) runs out.
    group = "reason-stall-callback"
    c = members.start(f"{group}-c", server, group, TOPIC, *FAST, "--revoke-stall", "9")
    wait_until(lambda: stable(server, group, 1), 30, f"{group}: c alone and Stable", members.describe)
    d = members.start(f"{group}-d", server, group, TOPIC, *FAST)  # c has to give up its partitions: it hangs

    def evicted() -> dict | None:
        for r in timeline(server, group):
            if r["outcome"] != "in_progress" and any(
                m["cause"] == "rebalance_timeout" for m in r["members_out"]
            ):
                return r
        return None

    entry = wait_until(evicted, 30, "c's eviction at the rebalance timeout", members.describe)
    assert entry["reason"] == "new_member" and entry["triggered_by"]["client_id"] == f"{group}-d"
    assert [m["client_id"] for m in entry["members_out"]] == [f"{group}-c"]
    assert entry["duration_ms"] >= 4500  # the group waited out the whole rebalance timeout
    assert (
        value(
            metrics(server),
            "kafka_consumergroup_member_expirations_total",
            consumergroup=group,
            cause="rebalance_timeout",
        )
        == 1
    )
    assert entry["members"] == 1 and entry["outcome"] == "stable"
    for m in (c, d):
        m.kill()


def test_a_static_member_is_replaced(server, members):
    group = "reason-static"
    range_first = ["--instance-id", "node-1", "--set", "partition.assignment.strategy=range,roundrobin"]
    s1 = members.start(f"{group}-s1", server, group, TOPIC, *FAST, *range_first)
    wait_until(lambda: stable(server, group, 1), 30, "s1 Stable", members.describe)
    before = len(timeline(server, group))

    # A rolling restart: the same instance id comes back with the same protocols. It replaces s1 in place,
    # without a rebalance, and s1 (still running) is fenced.
    s2 = members.start(f"{group}-s2", server, group, TOPIC, *FAST, *range_first)
    wait_until(lambda: s2.events("assigned"), 30, "s2 assigned", members.describe)
    wait_until(
        lambda: (
            (
                value(
                    metrics(server),
                    "kafka_consumergroup_fenced_total",
                    consumergroup=group,
                    error="FENCED_INSTANCE_ID",
                )
                or 0
            )
            >= 1
        ),
        30,
        "s1 fenced",
        members.describe,
    )
    assert len(timeline(server, group)) == before
    s1.kill()

    # The same instance again, now preferring another assignor: the selected protocol changes, so it rebalances.
    s3 = members.start(
        f"{group}-s3",
        server,
        group,
        TOPIC,
        *FAST,
        "--instance-id",
        "node-1",
        "--set",
        "partition.assignment.strategy=roundrobin,range",
    )
    entry = last_with(server, group, "static_replacement", members.describe)
    assert entry["triggered_by"]["group_instance_id"] == "node-1"
    assert entry["triggered_by"]["client_id"] == f"{group}-s3"
    assert entry["protocol"] == "roundrobin"
    assert entry["members_in"] == [] and entry["members_out"] == []  # the same instance throughout
    assert rebalances(server, group, "static_replacement") == 1
    for m in (s2, s3):
        m.kill()


def test_kip800_reason_text_is_categorised_and_shown(server):
    """The Java consumer leaves with KIP-800 reason "consumer poll timeout has expired." when it stalls past
    max.poll.interval.ms; the raw wire client sends exactly that (JoinGroup v9 / LeaveGroup v5)."""
    group = "reason-kip800"
    host, port = server.bootstrap.rsplit(":", 1)
    with WireClient(host, int(port), client_id="java-like") as client:

        def join(member_id: str):
            return join_group(client, group, member_id, "need to re-join with the given member-id")

        member_id = join("").member_id
        joined = join(member_id)
        assert joined.error_code == 0, joined
        synced = sync_alone(client, group, joined.generation_id, member_id)
        assert synced.error_code == 0, synced
        reason = (
            "consumer poll timeout has expired. This means the time between subsequent calls to poll() "
            "was longer than the configured max.poll.interval.ms"
        )
        left = client.request(
            make(
                request_class(13, 5),
                {
                    "group_id": group,
                    "members": [{"member_id": member_id, "group_instance_id": None, "reason": reason}],
                },
            )
        )
        assert left.error_code == 0, left
    deadline = time.monotonic() + 10
    while not timeline(server, group)[-1:] or timeline(server, group)[-1]["outcome"] == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    first, last = timeline(server, group)
    assert first["reason"] == "new_member"
    assert first["client_reason"] == "need to re-join with the given member-id"
    assert last["reason"] == "rebalance_timeout" and last["client_reason"] == reason
    assert last["outcome"] == "empty" and last["members_out"][0]["cause"] == "left"
    assert rebalances(server, group, "rebalance_timeout") == 1
