"""Every enforced API on the wire, as User:ANONYMOUS on the PLAINTEXT listener, against Kafka's exact answers:
which error code, at which level (top, group, topic, partition), and what is filtered rather than refused."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AclOperation, ResourceType
from security_clients import admin, binding, commit_error_codes, create_acls, create_topic, produce, sasl
from security_support import SecureServers, acl_server_settings

from protocol.api import request_class  # noqa: E402
from protocol.build import build  # noqa: E402
from tests.support.wire import WireClient  # noqa: E402

pytestmark = pytest.mark.e2e

GAF, TAF, CAF = 30, 29, 31
ANON = "User:ANONYMOUS"


def req(api_key: int, version: int, **fields: Any) -> Any:
    return build(request_class(api_key, version), fields)


def test_every_api_answers_like_kafka(secure_servers: SecureServers) -> None:
    server = secure_servers(acl_server_settings())
    root = admin(server)
    for topic in ("open", "hidden"):
        create_topic(root, topic)
        assert set(produce(sasl(server, "admin"), topic, 2)) == {None}
    for group in ("g-open", "billing"):
        assert commit_error_codes(
            sasl(server, "admin"), group, [TopicPartition("open", 0, 1), TopicPartition("hidden", 0, 1)]
        ) == [0, 0]
    create_acls(
        root,
        binding(ResourceType.TOPIC, "open", ANON, AclOperation.READ),
        binding(ResourceType.GROUP, "g-open", ANON, AclOperation.READ),
    )
    host, port = server.listeners["PLAINTEXT"].rsplit(":", 1)
    with WireClient(host, int(port)) as c:
        # Metadata: all topics are filtered; named ones the caller may not describe are TOPIC_AUTHORIZATION_FAILED
        # whether they exist or not, and are never auto-created.
        meta = c.call(
            req(3, 12, topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        )
        assert {t.name for t in meta.topics} == {"open"}
        meta = c.call(
            req(
                3,
                12,
                topics=[{"name": "hidden"}, {"name": "missing"}, {"name": "open"}],
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=True,
            )
        )
        by_name = {t.name: t for t in meta.topics}
        assert {n: t.error_code for n, t in by_name.items()} == {"hidden": TAF, "missing": TAF, "open": 0}
        assert by_name["open"].topic_authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE
        # FindCoordinator (batched): per key.
        found = c.call(req(10, 4, key_type=0, coordinator_keys=["g-open", "g-none"]))
        assert {k.key: k.error_code for k in found.coordinators} == {"g-open": 0, "g-none": GAF}
        # OffsetFetch v7: GROUP DESCRIBE at the top; fetch-all drops topics the caller may not describe.
        fetched = c.call(req(9, 7, group_id="g-open", topics=None, require_stable=False))
        assert fetched.error_code == 0 and [t.name for t in fetched.topics] == ["open"]
        assert c.call(req(9, 7, group_id="billing", topics=None, require_stable=False)).error_code == GAF
        # OffsetFetch v8: per group, and per partition for a named topic without DESCRIBE.
        fetched = c.call(
            req(
                9,
                8,
                require_stable=False,
                groups=[
                    {
                        "group_id": "g-open",
                        "topics": [
                            {"name": "open", "partition_indexes": [0]},
                            {"name": "hidden", "partition_indexes": [0]},
                        ],
                    },
                    {"group_id": "billing", "topics": None},
                ],
            )
        )
        groups = {g.group_id: g for g in fetched.groups}
        assert groups["billing"].error_code == GAF
        parts = {
            t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset)
            for t in groups["g-open"].topics
        }
        assert parts == {"open": (0, 1), "hidden": (TAF, -1)}
        # OffsetCommit (simple commit): per-partition TOPIC_AUTHORIZATION_FAILED for the topic without READ.
        committed = c.call(
            req(
                8,
                8,
                group_id="g-open",
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=[
                    {
                        "name": "open",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 2,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    },
                    {
                        "name": "hidden",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 2,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    },
                ],
            )
        )
        assert {t.name: t.partitions[0].error_code for t in committed.topics} == {"open": 0, "hidden": TAF}
        # DescribeGroups: authorized operations from the ACLs (READ implies DESCRIBE), others refused.
        described = c.call(req(15, 5, groups=["g-open", "billing"], include_authorized_operations=True))
        by_group = {g.group_id: g for g in described.groups}
        assert by_group["billing"].error_code == GAF
        assert by_group["g-open"].error_code == 0
        assert by_group["g-open"].authorized_operations == (1 << 3) | (1 << 8)
        # ListGroups: only what the caller may describe (no CLUSTER DESCRIBE).
        listed = c.call(req(16, 4, states_filter=[]))
        assert listed.error_code == 0 and {g.group_id for g in listed.groups} == {"g-open"}
        # Group membership APIs: GROUP READ.
        joined = c.call(
            req(
                11,
                5,
                group_id="billing",
                session_timeout=10000,
                rebalance_timeout=10000,
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[{"name": "range", "metadata": b""}],
            )
        )
        assert joined.error_code == GAF
        assert (
            c.call(
                req(12, 4, group_id="billing", generation_id=1, member_id="m", group_instance_id=None)
            ).error_code
            == GAF
        )
        # Deleting needs GROUP DELETE, which READ does not give.
        deleted = c.call(req(42, 2, groups_names=["g-open"]))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("g-open", GAF)]
        assert (
            c.call(
                req(
                    47,
                    0,
                    group_id="g-open",
                    topics=[{"name": "open", "partitions": [{"partition_index": 0}]}],
                )
            ).error_code
            == GAF
        )
        # ListOffsets: TOPIC DESCRIBE per topic.
        offsets = c.call(
            req(
                2,
                7,
                replica_id=-1,
                isolation_level=0,
                topics=[
                    {"name": "open", "partitions": [{"partition_index": 0, "timestamp": -1}]},
                    {"name": "hidden", "partitions": [{"partition_index": 0, "timestamp": -1}]},
                ],
            )
        )
        assert {t.name: (t.partitions[0].error_code, t.partitions[0].offset) for t in offsets.topics} == {
            "open": (0, 2),
            "hidden": (TAF, -1),
        }
        # Topic administration and idempotent producers.
        created = c.call(
            req(
                19,
                7,
                topics=[
                    {
                        "name": "newt",
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                timeout=10000,
                validate_only=False,
            )
        )
        assert [(t.name, t.error_code, t.error_message) for t in created.topics] == [
            ("newt", TAF, "Authorization failed.")
        ]
        dropped = c.call(req(20, 6, topics=[{"name": "open", "topic_id": None}], timeout=10000))
        assert [(r.name, r.error_code) for r in dropped.responses] == [("open", TAF)]
        assert c.call(req(22, 4, transactional_id=None, transaction_timeout=60000)).error_code == CAF
        # The ACL APIs need CLUSTER DESCRIBE / ALTER.
        acls = c.call(
            req(
                29,
                3,
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            )
        )
        assert acls.error_code == CAF and acls.resources == ()
    # The refusals are counted by API and operation (summed over the workers, each of which has its series).
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=30) as resp:
        metrics = resp.read().decode()
    refused: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "kafka_group_coordinator_authorization_failures_total":
                key = (sample.labels["api"], sample.labels["operation"])
                refused[key] = refused.get(key, 0) + sample.value
    assert refused[("JoinGroup", "READ")] == 1
    assert refused[("DeleteGroups", "DELETE")] == 1
