"""The /v1 admin API resets offsets of an Empty group (earliest, latest, by timestamp, explicit) and deletes
groups, through the same durable path as Kafka requests: what it answered is there after a restart."""

from __future__ import annotations

import time

import pytest
from obs_support import get_json, metrics, produce, value, wait_until

pytestmark = pytest.mark.e2e

TOPIC, GROUP = "obs-admin", "obs-admin-group"


def reset(server, group: str, **body) -> tuple[int, dict]:
    return get_json(server, f"/v1/groups/{group}/reset-offsets", "POST", body)


def committed(server, group: str) -> dict[int, int]:
    status, body = get_json(server, f"/v1/groups/{group}")
    assert status == 200, body
    return {o["partition"]: o["committed_offset"] for o in body["offsets"] if o["topic"] == TOPIC}


def test_reset_offsets_and_delete(server_factory, members):
    server = server_factory()
    produce(server, TOPIC, 2, 10)
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    ends = produce(server, TOPIC, 2, 10)
    assert ends == {0: 20, 1: 20}

    member = members.start("admin-a", server, GROUP, TOPIC)
    wait_until(lambda: member.committed() == ends, 60, "the member to commit everything", members.describe)

    # A group with members is refused, and nothing changes.
    status, body = reset(server, GROUP, to="earliest")
    assert (status, body["error"]) == (409, "NON_EMPTY_GROUP"), body
    status, body = get_json(server, f"/v1/groups/{GROUP}", "DELETE")
    assert (status, body["error"]) == (409, "NON_EMPTY_GROUP"), body
    member.close()
    wait_until(lambda: get_json(server, f"/v1/groups/{GROUP}")[1]["state"] == "Empty", 30, "Empty group")
    assert committed(server, GROUP) == {0: 20, 1: 20}

    status, body = reset(server, GROUP, to="earliest", dry_run=True)
    assert status == 200 and body["dry_run"]
    assert [(o["partition"], o["previous"], o["offset"]) for o in body["offsets"]] == [(0, 20, 0), (1, 20, 0)]
    assert committed(server, GROUP) == {0: 20, 1: 20}

    assert reset(server, GROUP, to="earliest")[0] == 200
    assert committed(server, GROUP) == {0: 0, 1: 0}
    samples = metrics(server)
    assert value(samples, "kafka_consumergroup_lag", consumergroup=GROUP, topic=TOPIC, partition="0") == 20

    assert reset(server, GROUP, to="latest")[0] == 200
    assert committed(server, GROUP) == {0: 20, 1: 20}

    status, body = reset(server, GROUP, to="timestamp", timestamp_ms=middle_ms)
    assert status == 200, body
    assert committed(server, GROUP) == {0: 10, 1: 10}  # the first record of the second batch

    status, body = reset(
        server,
        GROUP,
        to="explicit",
        offsets=[
            {"topic": TOPIC, "partition": 0, "offset": 3},
            {"topic": TOPIC, "partition": 1, "offset": 999},
        ],
    )
    assert status == 200, body
    assert [(o["requested"], o["offset"]) for o in body["offsets"]] == [(3, 3), (999, 20)]  # clamped
    assert committed(server, GROUP) == {0: 3, 1: 20}

    status, body = reset(server, GROUP, to="offset", offset=5, topics=[f"{TOPIC}:1"])
    assert status == 200 and [(o["partition"], o["offset"]) for o in body["offsets"]] == [(1, 5)]
    assert committed(server, GROUP) == {0: 3, 1: 5}

    status, body = reset(server, GROUP, to="earliest", topics=["no-such-topic"])
    assert (status, body["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    status, body = reset(server, GROUP, to="sideways")
    assert (status, body["error"]) == (400, "INVALID_REQUEST")

    # A group that never existed gets offsets as a simple group (generation -1 commit), and lag like any other.
    status, body = reset(server, "obs-simple", to="offset", offset=4, topics=[TOPIC])
    assert status == 200, body
    samples = metrics(server)
    assert (
        value(samples, "kafka_consumergroup_lag", consumergroup="obs-simple", topic=TOPIC, partition="1")
        == 16
    )

    # The answers were sent after the records were durable: a restart on the same log keeps them.
    server_factory.stop(server)
    server = server_factory(data_dir=server.data_dir)
    wait_until(lambda: get_json(server, "/v1/groups")[0] == 200, 30, "the restarted server to load")
    assert committed(server, GROUP) == {0: 3, 1: 5}

    status, body = get_json(server, f"/v1/groups/{GROUP}", "DELETE")
    assert (status, body) == (200, {"group_id": GROUP, "deleted": True})
    assert get_json(server, f"/v1/groups/{GROUP}")[0] == 404
    assert GROUP not in [g["group_id"] for g in get_json(server, "/v1/groups")[1]["groups"]]
    assert get_json(server, f"/v1/groups/{GROUP}", "DELETE")[0] == 404
    assert f'consumergroup="{GROUP}"' not in str(metrics(server))
    server_factory.stop(server)
    server = server_factory(data_dir=server.data_dir)
    wait_until(lambda: get_json(server, "/v1/groups")[0] == 200, 30, "the restarted server to load")
    assert get_json(server, f"/v1/groups/{GROUP}")[0] == 404
