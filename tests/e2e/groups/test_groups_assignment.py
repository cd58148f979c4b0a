"""Three members of one group settle on an even split of a 6-partition topic and, committing synchronously after
processing, consume every produced message exactly once: confluent-kafka with range and with cooperative-sticky,
kafka-python and aiokafka with their default assignors. Every member runs in its own process."""

from __future__ import annotations

import pytest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

from tests.support.members import (
    admin,
    check_exactly_once,
    commit_errors,
    committed_offsets,
    consumed_all,
    create_topic,
    high_watermarks,
    member_errors,
    produce_batch,
    wait_for,
    wait_split,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.e2e

PARTITIONS = 6


def describe_raw(server, group: str):
    with WireClient(server.host, server.port) as c:
        resp = c.request(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False))
    assert len(resp.groups) == 1
    return resp.groups[0]


def even_split_scenario(members, server, tmp_path, lib: str, group: str, settings: dict, seed: int) -> dict:
    """Produce some, start 3 members, wait for 2/2/2, produce more, consume all, close; check exactly once and that
    the committed offsets are the end offsets. Returns the settled split and the group as DescribeGroups sees it."""
    topic = f"{group}-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(
        server, topic, 300, seed, tmp_path
    )  # before: the first member starts on a full topic
    ms = [members.start(lib, f"m{i}", server, group, topic, settings=settings) for i in range(3)]
    split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=40)
    described = describe_raw(server, group)

    after = produce_batch(server, topic, 600, seed + 1, tmp_path)
    placed |= after
    wait_for(lambda: consumed_all(ms, placed), 30, "every produced record to be consumed", members.describe)
    # After the split settled, each member read the new records of its own partitions only.
    for m in ms:
        stray = [(p, o) for p, o, _k in m.records() if (p, o) in after and p not in split[m.name]]
        assert not stray, (
            f"{m.name} holding {sorted(split[m.name])} consumed records of other partitions: {stray[:5]}"
        )
    assert {m.name: m.held() for m in ms} == split, (
        "the assignment changed while consuming\n" + members.describe()
    )

    for m in ms:
        assert m.close() == 0, members.describe([m])
    check_exactly_once(ms, placed)
    assert commit_errors(ms) == [], members.describe()
    assert committed_offsets(server, group, topic, PARTITIONS) == high_watermarks(placed, PARTITIONS)
    return {"split": split, "described": described, "members": ms}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_even_split_exactly_once(members, server, tmp_path, strategy):
    group = f"ck-split-{strategy}"
    out = even_split_scenario(
        members,
        server,
        tmp_path,
        "ck",
        group,
        {"partition.assignment.strategy": strategy, "heartbeat.interval.ms": 1000},
        seed=100,
    )
    protocols = {e["protocol"] for m in out["members"] for e in m.rebalance_events()}
    assert protocols == {"EAGER" if strategy == "range" else "COOPERATIVE"}, protocols
    if strategy == "range":
        assert sorted(sorted(s) for s in out["split"].values()) == [[0, 1], [2, 3], [4, 5]], out["split"]
    d = out["described"]
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        0,
        "Stable",
        "consumer",
        strategy,
    ), d
    assert sorted(m.client_id for m in d.members) == ["ck-m0", "ck-m1", "ck-m2"], d
    assert member_errors(out["members"]) == [], members.describe()


@pytest.mark.parametrize("lib, protocol", [("kp", "range"), ("aio", "roundrobin")])
def test_python_clients_even_split_exactly_once(members, server, tmp_path, lib, protocol):
    # Default assignors: kafka-python offers range then roundrobin, aiokafka roundrobin. No api_version pin.
    group = f"{lib}-split"
    out = even_split_scenario(
        members, server, tmp_path, lib, group, {"heartbeat_interval_ms": 1000}, seed=200
    )
    d = out["described"]
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        0,
        "Stable",
        "consumer",
        protocol,
    ), d
    assert sorted(m.client_id for m in d.members) == [f"{lib}-m{i}" for i in range(3)], d
    # After everybody left, the group is empty and still known.
    listing = admin(server, "list")
    assert listing["error"] is None, listing
    assert [g["state"] for g in listing["groups"] if g["group_id"] == group] == ["EMPTY"], listing
