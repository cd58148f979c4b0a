"""The authorization matrix with confluent-kafka (librdkafka) clients: with and without credentials, with and
without ACLs, every client gets exactly Kafka's error (issue #9, user-needs item 26).

The server has a SASL_PLAINTEXT listener (SCRAM users admin, alice, bob; admin is a super user) and a PLAINTEXT
listener (principal User:ANONYMOUS), and Kafka's authorizer with allow.everyone.if.no.acl.found=false.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from security_clients import (
    admin,
    all_acls,
    anonymous,
    binding,
    commit_error_codes,
    consume,
    create_acls,
    create_topic,
    group_ids,
    produce,
    sasl,
)
from security_support import SecureServers, acl_server_settings

pytestmark = pytest.mark.e2e

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
DENY = AclPermissionType.DENY
PREFIXED = ResourcePatternType.PREFIXED


def codes(errors: list[KafkaError | None]) -> set[int | None]:
    return {e.code() if e is not None else None for e in errors}


def test_matrix_without_and_with_acls(secure_servers: SecureServers) -> None:
    server = secure_servers(acl_server_settings())
    root = admin(server)
    create_topic(root, "orders")
    create_topic(root, "secret")
    assert codes(produce(sasl(server, "admin"), "orders", 4)) == {None}  # super user: no ACL needed

    # No ACLs at all: alice (SCRAM) and an anonymous client are refused, with Kafka's codes.
    for conf in (sasl(server, "alice"), anonymous(server)):
        assert codes(produce(conf, "orders")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
        _, errors = consume(conf, "orders-app", "orders", 1, timeout_s=15)
        assert codes(errors) == {KafkaError.GROUP_AUTHORIZATION_FAILED}

    # Grants: WRITE on orders; READ on groups prefixed spark-kafka-source- (Spark's generated ids) and on orders.
    create_acls(
        root,
        binding(TOPIC, "orders", "User:alice", WRITE),
        binding(TOPIC, "orders", "User:alice", READ),
        binding(GROUP, "spark-kafka-source-", "User:alice", READ, pattern=PREFIXED),
    )
    alice = sasl(server, "alice")
    assert codes(produce(alice, "orders", 2)) == {None}
    spark_group = "spark-kafka-source-4b1d-driver-0"
    values, errors = consume(alice, spark_group, "orders", 6)
    assert errors == [] and len(values) == 6
    # Another group id is not covered by the prefix.
    _, errors = consume(alice, "orders-app", "orders", 1, timeout_s=15)
    assert codes(errors) == {KafkaError.GROUP_AUTHORIZATION_FAILED}
    # bob and the anonymous client still have nothing.
    assert codes(produce(sasl(server, "bob"), "orders")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert codes(produce(anonymous(server), "orders")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    # OffsetCommit: GROUP READ is there, TOPIC READ on `secret` is not: per-partition TOPIC_AUTHORIZATION_FAILED.
    assert commit_error_codes(
        alice, spark_group, [TopicPartition("orders", 0, 1), TopicPartition("secret", 0, 1)]
    ) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # Without GROUP DESCRIBE, FindCoordinator already refuses the group (librdkafka then never finds a
    # coordinator); with DESCRIBE but not READ, OffsetCommit itself answers GROUP_AUTHORIZATION_FAILED.
    assert commit_error_codes(alice, "not-hers", [TopicPartition("orders", 0, 1)]) == [KafkaError._WAIT_COORD]
    create_acls(root, binding(GROUP, "describe-only", "User:alice", DESCRIBE))
    assert commit_error_codes(alice, "describe-only", [TopicPartition("orders", 0, 1)]) == [
        KafkaError.GROUP_AUTHORIZATION_FAILED
    ]

    # DENY beats ALLOW: a DENY READ on orders for everyone stops alice's fetch, her commits too.
    create_acls(root, binding(TOPIC, "orders", "User:*", READ, DENY))
    _, errors = consume(alice, "spark-kafka-source-other", "orders", 1, timeout_s=20)
    assert codes(errors) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert commit_error_codes(alice, spark_group, [TopicPartition("orders", 0, 2)]) == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    assert codes(produce(alice, "orders", 1)) == {None}  # WRITE is not denied


def test_list_groups_is_filtered_to_what_the_principal_may_describe(secure_servers: SecureServers) -> None:
    server = secure_servers(acl_server_settings())
    root = admin(server)
    create_topic(root, "events")
    assert codes(produce(sasl(server, "admin"), "events", 2)) == {None}
    for group in ("spark-kafka-source-a", "spark-kafka-source-b", "billing"):
        values, errors = consume(sasl(server, "admin"), group, "events", 2)
        assert errors == [] and len(values) == 2
    assert group_ids(root) >= {"spark-kafka-source-a", "spark-kafka-source-b", "billing"}
    alice = admin_for(server, "alice")
    assert group_ids(alice) == set()
    # DESCRIBE via a PREFIXED ACL shows exactly those groups; READ implies DESCRIBE (billing, LITERAL).
    create_acls(
        root,
        binding(GROUP, "spark-kafka-source-", "User:alice", DESCRIBE, pattern=PREFIXED),
        binding(GROUP, "billing", "User:bob", READ),
    )
    assert group_ids(alice) == {"spark-kafka-source-a", "spark-kafka-source-b"}
    assert group_ids(admin_for(server, "bob")) == {"billing"}
    # describe_consumer_groups: GROUP_AUTHORIZATION_FAILED for a group alice may not describe.
    futures = alice.describe_consumer_groups(["spark-kafka-source-a", "billing"], request_timeout=30)
    assert futures["spark-kafka-source-a"].result().group_id == "spark-kafka-source-a"
    with pytest.raises(Exception) as excinfo:
        futures["billing"].result()
    assert excinfo.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def admin_for(server, user: str):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient(sasl(server, user))


def test_acl_admin_needs_cluster_alter_and_acls_survive_restart(secure_servers: SecureServers) -> None:
    server = secure_servers(acl_server_settings())
    root = admin(server)
    wanted = [
        binding(GROUP, "spark-kafka-source-", "User:alice", READ, pattern=PREFIXED),
        binding(TOPIC, "orders", "User:alice", READ),
        binding(TOPIC, "orders", "User:*", WRITE, DENY),
    ]
    create_acls(root, *wanted)
    # alice may not manage ACLs: CLUSTER_AUTHORIZATION_FAILED, as Kafka.
    alice = admin_for(server, "alice")
    with pytest.raises(Exception) as excinfo:
        create_acls(alice, binding(TOPIC, "x", "User:alice", READ))
    assert excinfo.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    before = sorted(map(str, all_acls(root)))
    assert before == sorted(map(str, wanted))

    data_dir = server.data_dir
    secure_servers.stop(server)
    again = secure_servers(acl_server_settings(), data_dir=data_dir)
    assert sorted(map(str, all_acls(admin(again)))) == before
    create_topic(admin(again), "orders")
    assert codes(produce(sasl(again, "admin"), "orders", 2)) == {None}
    values, errors = consume(sasl(again, "alice"), "spark-kafka-source-z", "orders", 2)
    assert errors == [] and len(values) == 2
    assert codes(produce(sasl(again, "alice"), "orders", 1)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_consumer_group_protocol_is_authorized_as_kafka_does(secure_servers: SecureServers) -> None:
    """ConsumerGroupHeartbeat needs GROUP READ (else a fatal GROUP_AUTHORIZATION_FAILED for the client);
    ConsumerGroupDescribe needs GROUP DESCRIBE per group, answered per group (librdkafka aborts the process on an
    answer without an entry per group it asked for)."""
    server = secure_servers(acl_server_settings())
    root = admin(server)
    create_topic(root, "kip848")
    assert codes(produce(sasl(server, "admin"), "kip848", 2)) == {None}
    create_acls(root, binding(TOPIC, "kip848", "User:alice", READ))
    values, errors = consume(sasl(server, "alice"), "kip848-group", "kip848", 2, group_protocol="consumer")
    assert values == [] and errors, errors
    assert any("authoriz" in e.str().lower() for e in errors), [e.str() for e in errors]
    values, errors = consume(sasl(server, "admin"), "kip848-group", "kip848", 2, group_protocol="consumer")
    assert errors == [] and len(values) == 2, errors
    alice = admin_for(server, "alice")
    futures = alice.describe_consumer_groups(["kip848-group"], request_timeout=30)
    with pytest.raises(Exception) as excinfo:
        futures["kip848-group"].result()
    assert excinfo.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    create_acls(root, binding(GROUP, "kip848-group", "User:alice", DESCRIBE))
    described = alice.describe_consumer_groups(["kip848-group"], request_timeout=30)["kip848-group"].result()
    assert described.group_id == "kip848-group"
