"""Every advertised version of the simple APIs, sent over a raw socket and decoded with kio.

Clients each pick one version per API; this sweeps all of them, so a header (flexible or not), a field added
in some version, or trailing bytes in one version's response is caught. Requests are built from one superset
of values per API: each version takes the fields it has. Versions come from the server's own ApiVersions
answer.
"""

from __future__ import annotations

import uuid

import pytest
from kio.index import UnknownEntity
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from tests.support.e2e import create_topic
from tests.support.wire import WireClient, decode_response, encode_request, make, recv_frame, request_class

pytestmark = pytest.mark.e2e

UNSUPPORTED_VERSION = 35


def advertised(client: WireClient) -> dict[int, tuple[int, int]]:
    resp = client.request(ApiVersionsRequest(client_software_name="e2e-sweep", client_software_version="1"))
    assert resp.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def versions(ranges: dict[int, tuple[int, int]], api_key: int) -> list[int]:
    lo, hi = ranges[api_key]
    out = []
    for v in range(lo, hi + 1):
        try:
            request_class(api_key, v)
        except UnknownEntity:  # newer than kio knows: cannot be checked here
            continue
        out.append(v)
    assert out, f"api {api_key}: no advertised version kio knows ({lo}..{hi})"
    return out


@pytest.fixture
def sweep(server):
    create_topic("ck", server, "sweep", 3)
    with WireClient(server.host, server.port, client_id="e2e-sweep") as client:
        yield server, client, advertised(client)


def test_api_versions_every_version_and_unsupported_one(sweep):
    server, client, ranges = sweep
    assert {0, 1, 2, 3, 18, 19, 20} <= set(ranges), ranges
    for v in versions(ranges, 18):
        body = make(request_class(18, v), {"client_software_name": "e2e", "client_software_version": "1"})
        resp = client.request(body)
        assert resp.error_code == 0, v
        assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == ranges, v

    # KIP-511: a too-new ApiVersions gets UNSUPPORTED_VERSION in a v0-shaped body listing the ranges.
    too_new = ranges[18][1] + 1
    frame = bytearray(
        encode_request(
            make(request_class(18, 3), {"client_software_name": "e2e", "client_software_version": "1"}), 4242
        )
    )
    frame[6:8] = too_new.to_bytes(2, "big")
    client.sock.sendall(bytes(frame))
    cid, resp = decode_response(18, 0, recv_frame(client.sock))
    assert cid == 4242
    assert resp.error_code == UNSUPPORTED_VERSION
    assert {k.api_key for k in resp.api_keys} == set(ranges)


def test_metadata_every_version(sweep):
    server, client, ranges = sweep
    values = {
        "topics": [{"name": "sweep", "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    for v in versions(ranges, 3):
        resp = client.request(make(request_class(3, v), values))
        assert (resp.brokers[0].node_id, resp.brokers[0].host, resp.brokers[0].port) == (
            1,
            server.host,
            server.port,
        ), v
        assert [b.node_id for b in resp.brokers] == server.node_ids, v
        assert [t.name for t in resp.topics] == ["sweep"], v
        t = resp.topics[0]
        assert t.error_code == 0, (v, t.error_code)
        assert sorted(p.partition_index for p in t.partitions) == [0, 1, 2], v
        for p in t.partitions:
            assert (p.error_code, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) == (
                0,
                1,
                (1,),
                (1,),
            ), v
        if hasattr(resp, "controller_id"):
            assert resp.controller_id == 1, v
        if hasattr(t, "topic_id") and v >= 10:
            assert t.topic_id not in (None, uuid.UUID(int=0)), f"v{v}: topic has no id"


def test_list_offsets_every_version(sweep):
    server, client, ranges = sweep
    for v in versions(ranges, 2):
        for ts in (-2, -1):  # earliest, latest: both 0 on an empty partition
            values = {
                "replica_id": -1,
                "isolation_level": 0,
                "timeout": 5000,
                "topics": [
                    {
                        "name": "sweep",
                        "partitions": [
                            {
                                "partition_index": 1,
                                "current_leader_epoch": -1,
                                "timestamp": ts,
                                "max_num_offsets": 1,
                            }
                        ],
                    }
                ],
            }
            resp = client.request(make(request_class(2, v), values))
            [topic] = resp.topics
            [part] = topic.partitions
            assert (topic.name, part.partition_index, part.error_code) == ("sweep", 1, 0), (v, ts, part)
            got = part.offset if hasattr(part, "offset") else part.old_style_offsets[0]
            assert got == 0, (v, ts, part)


def test_find_coordinator_every_version(sweep):
    server, client, ranges = sweep
    values = {"key": "sweep-group", "key_type": 0, "coordinator_keys": ["sweep-group"]}
    for v in versions(ranges, 10):
        resp = client.request(make(request_class(10, v), values))
        found = resp.coordinators if hasattr(resp, "coordinators") else [resp]
        assert [(c.error_code, c.node_id, c.host, c.port) for c in found] == [
            (0, 1, server.host, server.port)
        ], v


def test_create_and_delete_topics_every_version(sweep):
    server, client, ranges = sweep
    names = {}
    for v in versions(ranges, 19):
        name = f"sweep-create-v{v}"
        values = {
            "topics": [
                {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout": 5000,
            "validate_only": False,
        }
        resp = client.request(make(request_class(19, v), values))
        assert [(t.name, t.error_code) for t in resp.topics] == [(name, 0)], (v, resp.topics)
        if hasattr(resp.topics[0], "num_partitions"):
            assert resp.topics[0].num_partitions == 2, v
        names[v] = name

    delete_versions = versions(ranges, 20)
    pending = list(names.values())
    for i, v in enumerate(delete_versions):
        batch = pending[i :: len(delete_versions)]
        if not batch:
            continue
        values = {
            "topic_names": batch,
            "topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in batch],
            "timeout": 5000,
        }
        resp = client.request(make(request_class(20, v), values))
        assert sorted((r.name, r.error_code) for r in resp.responses) == sorted((n, 0) for n in batch), v

    md = client.request(
        make(
            request_class(3, 12),
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
    )
    assert sorted(t.name for t in md.topics) == ["sweep"], "deleted topics still listed"
