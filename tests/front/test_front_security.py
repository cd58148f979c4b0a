"""The client-facing security state in front of a cluster (coordinator.front.security): ACLs and SCRAM credentials
live in a topic of the cluster, so every instance (and every worker of one) has the same ones, and an instance
started on an empty disk has them all. Real confluent-kafka clients over SASL/SCRAM, a real 3-node Kafka."""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.security.security_support import make_pki
from tests.support.kafka_cluster import create_replicated_topic
from tests.support.members import wait_for
from tests.support.server import readyz

pytestmark = pytest.mark.e2e

ADMIN = ("admin", "admin-secret")


def _client(server, user: tuple[str, str], **extra) -> dict:
    return {
        "bootstrap.servers": server.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user[0],
        "sasl.password": user[1],
        **extra,
    }


def _consume(server, user: tuple[str, str], group: str, topic: str, want: int, timeout: float = 30) -> list:
    """Records of `topic` consumed as `user` in `group` through `server`, committed; raises the first error."""
    consumer = Consumer(
        _client(
            server, user, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
    )
    try:
        got = _subscribe_and_poll(consumer, topic, want, timeout)
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _subscribe_and_poll(consumer: Consumer, topic: str, want: int, timeout: float) -> list:
    """The values `consumer` subscribed to `topic` polls until it has `want` or `timeout` s passed; raises the
    first error."""
    consumer.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            raise KafkaException(message.error())
        got.append(message.value())
    return got


def _consume_once_in_force(server, user: tuple[str, str], group: str, topic: str, want: int) -> list:
    """`_consume`, asked again while the user or its ACLs are not in force yet at the worker the connection
    reached: every instance and worker applies a change at its next read of the security topic (every 0.5 s), as
    Kafka's brokers apply an ACL change when it reaches them."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return _consume(server, user, f"{group}-{int(time.monotonic() * 1000)}", topic, want)
        except KafkaException as exc:
            not_yet = (
                KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
                KafkaError._AUTHENTICATION,
            )
            if exc.args[0].code() not in not_yet or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_acls_and_credentials_made_at_one_instance_are_in_force_at_every_other(server_factory, kafka_cluster):
    """Instance A (one process) and instance B (`--workers 2`, two more instances) on one state topic, SASL/SCRAM
    and Kafka's authorizer on their listener. A user and its ACLs made through A let that user consume through
    B's workers; a topic without an ACL stays refused there; B started again on an empty disk still has them."""
    state = f"kgc-security-{uuid.uuid4().hex[:8]}"
    settings = {
        "upstream.bootstrap.servers": kafka_cluster.bootstrap,
        "coordinator.state.topic": state,
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "scram.bootstrap.users": ":".join(ADMIN),
    }
    a = server_factory(settings)
    b = server_factory({**settings, "coordinator.workers": 2})
    for s in (a, b):
        wait_for(lambda s=s: readyz(s.admin_url), 60, "ready", s.output)
    wait_for(lambda: "3 instances" in a.stderr_path.read_text(), 60, "the plan of three", a.output)

    topic, secret = f"{state}-data", f"{state}-secret"
    for name in (topic, secret):
        create_replicated_topic(kafka_cluster.bootstrap, name, 2)
    producer = Producer(_client(a, ADMIN))
    for name in (topic, secret):
        for i in range(10):
            producer.produce(name, f"{name}-{i}".encode())
    assert producer.flush(30) == 0

    admin = AdminClient(_client(a, ADMIN))
    carol = ("carol", "carol-secret")
    upsert = UserScramCredentialUpsertion(
        carol[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), carol[1].encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:carol",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.READ, AclOperation.DESCRIBE)
    ]
    acls.append(
        AclBinding(
            ResourceType.GROUP,
            "carol-",
            ResourcePatternType.PREFIXED,
            "User:carol",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    for future in admin.create_acls(acls).values():
        future.result(30)

    # B's workers (either one answers a new connection) apply the topic's records within a read or two
    b_admin = AdminClient(_client(b, ADMIN))

    def b_knows_carol() -> bool:
        try:
            described = b_admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
        except KafkaException:
            return False  # RESOURCE_NOT_FOUND until B has read it
        return bool(described.scram_credential_infos)

    wait_for(b_knows_carol, 20, "carol's credential at B", b.output)
    for attempt in range(4):  # new connections: both of B's workers
        got = _consume_once_in_force(b, carol, f"carol-{attempt}", topic, 10)
        assert sorted(got) == sorted(f"{topic}-{i}".encode() for i in range(10)), got
    with pytest.raises(KafkaException) as refused:
        _consume(b, carol, "carol-secret-reader", secret, 1, timeout=15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused.value

    # nothing of it on B's disk: started again on an empty one, B still has carol and her ACLs
    b.stop()
    b2 = server_factory({**settings, "coordinator.workers": 2})
    wait_for(lambda: readyz(b2.admin_url), 60, "ready again", b2.output)
    got = _consume(b2, carol, "carol-after", topic, 10)  # (read whole before its listener opened: no wait)
    assert len(got) == 10, got
    wrong = Consumer(_client(b2, ("carol", "wrong"), **{"group.id": "carol-wrong"}))
    try:
        with pytest.raises(KafkaException) as failed:
            wrong.list_topics(timeout=10)
        assert failed.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT), (
            failed.value
        )
    finally:
        wrong.close()
    assert f"from the topic {state}-security" in b2.stderr_path.read_text()


def test_the_security_state_an_earlier_version_kept_on_disk_moves_into_the_topic(
    server_factory, kafka_cluster
):
    """A server whose SCRAM users (admin's two, dave's one) are in DATA_DIR/security (as every version before the
    topic kept them, and as one with `coordinator.state.topic=` still does), started on that directory with a state
    topic, moves them into the topic: an instance started on an empty disk then logs them in."""
    common = {
        "upstream.bootstrap.servers": kafka_cluster.bootstrap,
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "scram.bootstrap.users": ":".join(ADMIN),
    }
    on_disk = server_factory({**common, "coordinator.state.topic": ""})
    admin = AdminClient(_client(on_disk, ADMIN))
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    del admin
    data_dir = on_disk.data_dir
    assert server_factory.stop(on_disk) == 0

    state = f"kgc-security-{uuid.uuid4().hex[:8]}"
    moved = server_factory({**common, "coordinator.state.topic": state}, data_dir=data_dir)
    wait_for(
        lambda: "moved 3 ACLs and SCRAM credentials" in moved.stderr_path.read_text(),
        30,
        "moved",
        moved.output,
    )
    fresh = server_factory({**common, "coordinator.state.topic": state})
    dave = AdminClient(_client(fresh, ("dave", "dave-secret")))
    assert (
        dave.list_topics(timeout=20).topics is not None
    )  # logged in at the instance with nothing on its disk
    wrong = AdminClient(_client(fresh, ("dave", "wrong")))
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=10)


def test_clients_cannot_read_or_write_the_servers_own_topics_through_it(server_factory, kafka_cluster):
    """The front passes a client's requests on as its own principal, which may write its state and security
    topics: a client's Produce or Fetch naming them has its connection closed, and nothing reaches the topic."""
    state = f"kgc-own-{uuid.uuid4().hex[:8]}"
    server = server_factory(
        {"upstream.bootstrap.servers": kafka_cluster.bootstrap, "coordinator.state.topic": state}
    )
    wait_for(lambda: readyz(server.admin_url), 60, "ready", server.output)
    producer = Producer(
        {"bootstrap.servers": server.bootstrap, "message.timeout.ms": 6000, "retries": 0, "acks": "all"}
    )
    failed: list = []
    producer.produce(
        state, key=b"forged", value=b"x", partition=0, on_delivery=lambda err, msg: failed.append(err)
    )
    producer.flush(20)
    assert failed and failed[0] is not None, failed
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": f"{state}-reader",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(state, 0)])
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            assert message is None or message.error(), message.value()
    finally:
        consumer.close()
    assert "names this server's own topic" in server.stderr_path.read_text()
    # what the cluster holds: no forged record (read there directly)
    direct = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap,
            "group.id": f"{state}-check",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        direct.assign([TopicPartition(state, p) for p in range(50)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            message = direct.poll(0.5)
            assert message is None or message.error() or message.key() != b"forged"
    finally:
        direct.close()


def _sasl_authentications(admin_url: str) -> int:
    """SaslAuthenticate requests a server (one worker) has answered, from its /metrics."""
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = re.findall(
        r'^kafka_group_coordinator_requests_total\{api="SaslAuthenticate"[^}]*\} (\S+)$', text, re.M
    )
    return int(sum(float(c) for c in counts))


def test_tls_and_sasl_on_the_listener_every_worker_accepts_on(server_factory, kafka_cluster, tmp_path):
    """`--workers 2` in front of a cluster with a SASL_SSL listener: the supervisor binds it once and whichever
    worker accepts a connection does the TLS handshake and SASL, as each does on its own broker ports. Records
    produced and consumed over SASL_SSL through the two arrive whole, every group's commit is kept, both workers
    authenticated clients, and a plaintext request on that port gets no Kafka answer."""
    pki = make_pki(tmp_path)
    state = f"kgc-tls-{uuid.uuid4().hex[:8]}"
    server = server_factory(
        {
            "upstream.bootstrap.servers": kafka_cluster.bootstrap,
            "coordinator.state.topic": state,
            "listeners": "SASL_SSL://127.0.0.1:0",
            "ssl.keystore.location": str(pki.server_pem),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "scram.bootstrap.users": ":".join(ADMIN),
            "coordinator.workers": 2,
        }
    )
    host, admin_port = server.admin_url.rsplit(":", 1)
    worker_admin = [f"{host}:{int(admin_port) + w}" for w in range(2)]  # worker w's admin port: + w
    wait_for(lambda: all(readyz(url) for url in worker_admin), 60, "both workers ready", server.output)
    tls = {
        "bootstrap.servers": server.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),  # the certificate names 127.0.0.1: the host name is verified too
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": ADMIN[0],
        "sasl.password": ADMIN[1],
    }

    topic, partitions, records = f"{state}-data", 4, 40
    create_replicated_topic(kafka_cluster.bootstrap, topic, partitions)
    producer = Producer({**tls, "acks": "all"})
    for i in range(records):
        producer.produce(topic, f"r-{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0

    everything = sorted(f"r-{i}".encode() for i in range(records))
    for g in range(4):  # new connections each time, through either worker
        group = f"{state}-g{g}"
        consumer = Consumer(
            {**tls, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
        try:
            got = _subscribe_and_poll(consumer, topic, records, 60)
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert sorted(got) == everything, (group, got)
        checker = Consumer({**tls, "group.id": group})
        try:
            committed = checker.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        finally:
            checker.close()
        assert sum(tp.offset for tp in committed) == records, committed

    # each worker terminated TLS and SASL for some of those clients (the broker ports of both are in Metadata)
    per_worker = [_sasl_authentications(url) for url in worker_admin]
    assert all(n > 0 for n in per_worker), per_worker

    # the shared port speaks TLS only: a plaintext ApiVersions v0 gets no answer of Kafka's
    api_versions = struct.pack(">hhih", 18, 0, 7, -1)
    with socket.create_connection((server.host, server.port), timeout=10) as raw:
        raw.sendall(struct.pack(">i", len(api_versions)) + api_versions)
        try:
            answer = raw.recv(64)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    assert answer[4:8] != struct.pack(">i", 7), answer  # no correlation id 7: not a Kafka answer
