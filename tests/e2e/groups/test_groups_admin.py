"""confluent-kafka AdminClient on consumer groups: list, describe, list/alter offsets of an empty group, delete
(refused with NON_EMPTY_GROUP while members exist). Admin calls and members each run in their own process."""

from __future__ import annotations

import pytest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

from tests.support.members import (
    NON_EMPTY_GROUP,
    admin,
    check_exactly_once,
    committed_offsets,
    consumed_all,
    create_topic,
    high_watermarks,
    produce_batch,
    wait_for,
    wait_split,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SETTINGS = {"partition.assignment.strategy": "range", "heartbeat.interval.ms": 1000}


def test_admin_list_describe_offsets_delete(members, server, tmp_path):
    group, topic = "admin-group", "admin-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 120, 600, tmp_path)
    ms = [
        members.start("ck", f"c{i}", server, group, topic, client_id=f"admin-client-{i}", settings=SETTINGS)
        for i in range(3)
    ]
    split = wait_split(members, ms, PARTITIONS, [2, 2, 2], timeout=40)
    wait_for(lambda: consumed_all(ms, placed), 30, "everything consumed", members.describe)

    listing = admin(server, "list")
    assert listing["error"] is None and listing["errors"] == [], listing
    mine = [g for g in listing["groups"] if g["group_id"] == group]
    assert len(mine) == 1 and mine[0]["state"] == "STABLE" and mine[0]["simple"] is False, listing

    d = admin(server, "describe", "--group", group)
    assert d["error"] is None, d
    assert (d["state"], d["assignor"], d["simple"]) == ("STABLE", "range", False), d
    assert d["coordinator"] is not None and d["coordinator"]["id"] in server.node_ids, d
    assert [m["client_id"] for m in d["members"]] == [f"admin-client-{i}" for i in range(3)], d
    for i, m in enumerate(d["members"]):
        assert m["assignment"] == [[topic, p] for p in sorted(split[f"c{i}"])], (m, split)
        assert m["member_id"].startswith(f"admin-client-{i}-"), m  # Kafka: member id = client id + "-" + uuid
        assert m["instance_id"] is None
    with WireClient(server.host, server.port) as c:
        raw = c.request(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)).groups[0]
    assert (raw.error_code, raw.group_state, raw.protocol_type, raw.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    assert sorted(m.member_id for m in raw.members) == sorted(m["member_id"] for m in d["members"])

    refused = admin(server, "delete", "--group", group)
    assert refused["error"] is not None and refused["error"]["code"] == NON_EMPTY_GROUP, refused
    assert refused["error"]["name"] == "NON_EMPTY_GROUP", refused

    for m in ms:
        assert m.close() == 0, members.describe([m])
    listing = admin(server, "list")
    assert [g["state"] for g in listing["groups"] if g["group_id"] == group] == ["EMPTY"], listing
    d = admin(server, "describe", "--group", group)
    assert d["error"] is None and d["state"] == "EMPTY" and d["members"] == [], d

    hw = high_watermarks(placed, PARTITIONS)
    assert committed_offsets(server, group, topic, PARTITIONS) == hw
    everything = admin(server, "offsets", "--group", group)  # no partitions given: all committed offsets
    assert everything["error"] is None, everything
    assert everything["offsets"] == {f"{topic}:{p}": o for p, o in hw.items()}, everything

    rewind = {p: 1 + p % 2 for p in range(PARTITIONS)}
    altered = admin(
        server, "alter", "--group", group, "--topic", topic, *[f"--offset={p}={o}" for p, o in rewind.items()]
    )
    assert altered["error"] is None and not altered["partition_errors"], altered
    assert committed_offsets(server, group, topic, PARTITIONS) == rewind

    # A new member resumes at the altered offsets.
    r = members.start("ck", "r", server, group, topic, settings=SETTINGS)
    wanted = {k: v for k, v in placed.items() if k[1] >= rewind[k[0]]}
    wait_for(lambda: consumed_all([r], wanted), 40, "the re-read from the altered offsets", members.describe)
    assert r.close() == 0, members.describe([r])
    check_exactly_once([r], wanted)

    deleted = admin(server, "delete", "--group", group)
    assert deleted["error"] is None, deleted
    listing = admin(server, "list")
    assert group not in [g["group_id"] for g in listing["groups"]], listing
    gone = admin(server, "offsets", "--group", group, "--topic", topic, "--partitions", str(PARTITIONS))
    assert gone["error"] is None and set(gone["offsets"].values()) <= {-1, -1001}, gone
    again = admin(server, "delete", "--group", group)
    assert again["error"] is not None and again["error"]["name"] == "GROUP_ID_NOT_FOUND", again
