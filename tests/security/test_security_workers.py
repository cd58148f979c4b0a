"""TLS, SASL and ACLs with a worker per core (`coordinator.workers=2`, coordinator.cluster): every worker terminates
TLS and SASL on its own listeners, Metadata lists both on the listener the client came in on, a SCRAM group reads
through both, and a security change made through one worker is in force on the other once it is answered."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from security_clients import binding, create_acls, create_topic
from security_support import USERS, Pki, SecureServer, SecureServers, acl_server_settings

from coordinator.cluster.topology import owner_of
from protocol.api import request_class
from protocol.build import build
from tests.support.server import worker_pid
from tests.support.wire import WireClient

pytestmark = pytest.mark.e2e

WORKERS = 2
SHARDS = 50  # offsets.topic.num.partitions
GAF, TAF = 30, 29
TOPIC = "secure-orders"
RECORDS = 200


def settings(pki: Pki) -> dict[str, Any]:
    return acl_server_settings(
        **{
            "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.truststore.location": str(pki.ca),
            "coordinator.workers": WORKERS,
        }
    )


def ports(server: SecureServer, listener: str) -> list[int]:
    """Each worker's port of `listener`: worker w listens on the announced port + w."""
    first = int(server.listeners[listener].rsplit(":", 1)[1])
    return [first + w for w in range(WORKERS)]


def group_on(worker: int, prefix: str) -> str:
    return next(f"{prefix}-{i}" for i in range(1000) if owner_of(f"{prefix}-{i}", SHARDS, WORKERS) == worker)


def sasl_ssl(
    pki: Pki, port: int, user: str, mechanism: str = "SCRAM-SHA-512", **extra: Any
) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user],
        **extra,
    }


def req(api_key: int, version: int, **fields: Any) -> Any:
    return build(request_class(api_key, version), fields)


def plain_client(port: int, user: str, password: str | None = None) -> WireClient:
    """A raw connection to one worker's SASL_PLAINTEXT listener, authenticated with PLAIN."""
    client = WireClient("127.0.0.1", port, timeout=20)
    assert client.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    secret = USERS.get(user, "") if password is None else password
    answer = client.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{secret}".encode()))
    assert answer.error_code == 0, answer
    return client


def topic_error(client: WireClient, topic: str) -> int:
    meta = client.call(
        req(
            3,
            12,
            topics=[{"name": topic}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return int(meta.topics[0].error_code)


def group_error(client: WireClient, group: str) -> int:
    return int(client.call(req(9, 7, group_id=group, topics=None, require_stable=False)).error_code)


def acl(op: int, rtype: int, name: str, principal: str, permission: int, create: bool) -> Any:
    fields = {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": 3,  # LITERAL
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission_type": permission,
    }
    if create:
        return req(30, 3, creations=[fields])
    return req(
        31,
        3,
        filters=[
            {
                "resource_type_filter": rtype,
                "resource_name_filter": name,
                "pattern_type_filter": 3,
                "principal_filter": principal,
                "host_filter": "*",
                "operation": op,
                "permission_type": permission,
            }
        ],
    )


DESCRIBE = 8  # AclOperation
TOPIC_TYPE, GROUP_TYPE = 2, 3
DENY = 2


def test_sasl_ssl_with_acls_on_two_workers(secure_servers: SecureServers, pki: Pki) -> None:
    server = secure_servers(settings(pki))
    ssl_ports, plain_ports = ports(server, "SASL_SSL"), ports(server, "SASL_PLAINTEXT")

    # Metadata from either worker lists both, on the listener it was asked on.
    for listener, listener_ports in (("SASL_SSL", ssl_ports), ("SASL_PLAINTEXT", plain_ports)):
        for port in listener_ports:
            conf: dict[str, Any] = (
                sasl_ssl(pki, port, "admin")
                if listener == "SASL_SSL"
                else {
                    "bootstrap.servers": f"127.0.0.1:{port}",
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-256",
                    "sasl.username": "admin",
                    "sasl.password": USERS["admin"],
                }
            )
            brokers = AdminClient(conf).list_topics(timeout=30).brokers
            assert sorted((b.id, b.host, b.port) for b in brokers.values()) == [
                (1, "127.0.0.1", listener_ports[0]),
                (2, "127.0.0.1", listener_ports[1]),
            ], (listener, port)

    # A SCRAM group coordinated by worker 1, one member bootstrapped at each worker, reads every record once.
    root = AdminClient(sasl_ssl(pki, ssl_ports[1], "admin"))
    create_topic(root, TOPIC, partitions=4)
    group = group_on(1, "secure-readers")
    create_acls(
        root,
        *(
            binding(ResourceType.TOPIC, TOPIC, "User:alice", op)
            for op in (AclOperation.READ, AclOperation.WRITE)
        ),
        binding(ResourceType.GROUP, group, "User:alice", AclOperation.READ),
    )
    consumers = [
        Consumer(
            sasl_ssl(
                pki,
                port,
                "alice",
                "SCRAM-SHA-256",
                **{
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 10000,
                },
            )
        )
        for port in ssl_ports
    ]
    received: list[bytes] = []
    by_member = [0] * len(consumers)
    try:
        for consumer in consumers:
            consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while not all(c.assignment() for c in consumers) and time.monotonic() < deadline:
            for consumer in consumers:
                msg = consumer.poll(0.2)
                assert msg is None or msg.error() is not None, "a record before anything was produced"
        assignments = [{tp.partition for tp in c.assignment()} for c in consumers]
        assert all(assignments) and set().union(*assignments) == {0, 1, 2, 3}, assignments

        producer = Producer(sasl_ssl(pki, ssl_ports[1], "alice", **{"message.timeout.ms": 20000}))
        delivered: list[Any] = []
        for i in range(RECORDS):
            producer.produce(
                TOPIC, f"r{i}".encode(), partition=i % 4, callback=lambda err, _m: delivered.append(err)
            )
        producer.flush(30)
        assert delivered == [None] * RECORDS

        deadline = time.monotonic() + 60
        while len(received) < RECORDS and time.monotonic() < deadline:
            for index, consumer in enumerate(consumers):
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    continue
                received.append(msg.value())
                by_member[index] += 1
                consumer.commit(msg, asynchronous=False)
        assert sorted(received) == sorted(f"r{i}".encode() for i in range(RECORDS))  # each exactly once
        assert all(by_member), by_member  # both members read their share
        description = root.describe_consumer_groups([group], request_timeout=30)[group].result()
        assert description.coordinator.id == 2  # worker 1 coordinates it
        assert len(description.members) == WORKERS
    finally:
        for consumer in consumers:
            consumer.close()
    committed = root.list_consumer_group_offsets(
        [_request(group, [TopicPartition(TOPIC, p) for p in range(4)])], request_timeout=30
    )[group].result()
    assert sorted(tp.offset for tp in committed.topic_partitions) == [RECORDS // 4] * 4

    # An ACL written through one worker is in force on the other when it is answered (no wait), both ways.
    alice = [plain_client(port, "alice") for port in plain_ports]
    admins = [plain_client(port, "admin") for port in plain_ports]
    try:
        assert topic_error(alice[0], TOPIC) == 0 and group_error(alice[1], group) == 0
        deny_topic = (DESCRIBE, TOPIC_TYPE, TOPIC, "User:alice", DENY)
        created = admins[1].call(acl(*deny_topic, create=True))
        assert [r.error_code for r in created.results] == [0]
        assert topic_error(alice[0], TOPIC) == TAF  # refused by worker 0 on worker 1's write
        deny_group = (DESCRIBE, GROUP_TYPE, group, "User:alice", DENY)
        assert [r.error_code for r in admins[0].call(acl(*deny_group, create=True)).results] == [0]
        assert group_error(alice[1], group) == GAF  # refused by worker 1 on worker 0's write
        deleted = admins[0].call(acl(*deny_topic, create=False))
        assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
        assert topic_error(alice[1], TOPIC) == 0
    finally:
        for client in [*alice, *admins]:
            client.close()

    # A SCRAM user created through worker 1 authenticates on worker 0 at once.
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-secret"
    )
    through_worker_1 = AdminClient(sasl_ssl(pki, ssl_ports[1], "admin"))
    futures = through_worker_1.alter_user_scram_credentials([upsert], request_timeout=30)
    for future in futures.values():
        future.result()
    plain_client(plain_ports[0], "carol", "carol-secret").close()

    # A worker killed and restarted by its supervisor takes the state from worker 0 before it serves.
    worker1 = worker_pid(server.process, 1)
    os.kill(worker1, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client = plain_client(plain_ports[1], "carol", "carol-secret")
        except (OSError, AssertionError):
            time.sleep(0.3)
            continue
        try:
            assert group_error(client, group) == GAF  # carol has no ACL on the group
        finally:
            client.close()
        break
    else:
        pytest.fail("worker 1 did not come back with the security state\n" + server.process.output())
    with plain_client(plain_ports[1], "alice") as again:
        assert group_error(again, group) == GAF  # the DENY written before the restart


def _request(group: str, partitions: list[TopicPartition]) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group, partitions)
