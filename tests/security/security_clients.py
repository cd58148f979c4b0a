"""confluent-kafka helpers for the security tests (real librdkafka clients against the real server)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from security_support import USERS, SecureServer

WAIT_S = 30.0


def sasl(
    server: SecureServer,
    user: str,
    password: str | None = None,
    mechanism: str = "SCRAM-SHA-256",
    listener: str = "SASL_PLAINTEXT",
    **extra: Any,
) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": server.listeners[listener],
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user] if password is None else password,
    }
    conf.update(extra)
    return conf


def anonymous(server: SecureServer, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": server.listeners["PLAINTEXT"], **extra}


def admin(server: SecureServer) -> AdminClient:
    return AdminClient(sasl(server, "admin"))


def binding(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def create_acls(client: AdminClient, *bindings: AclBinding) -> None:
    for future in client.create_acls(list(bindings), request_timeout=WAIT_S).values():
        future.result()


def all_acls(client: AdminClient) -> list[AclBinding]:
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    return list(client.describe_acls(everything, request_timeout=WAIT_S).result())


def create_topic(client: AdminClient, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    for future in client.create_topics([NewTopic(name, partitions, 1)], request_timeout=WAIT_S).values():
        future.result()


def produce(conf: dict[str, Any], topic: str, count: int = 3) -> list[KafkaError | None]:
    """Produce `count` records; return each delivery's error (None on success)."""
    results: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), callback=lambda err, _msg: results.append(err))
    producer.flush(WAIT_S)
    return results


def consume(
    conf: dict[str, Any],
    group: str,
    topic: str,
    want: int,
    timeout_s: float = WAIT_S,
    group_protocol: str = "classic",
) -> tuple[list[bytes], list[KafkaError]]:
    """Join `group`, subscribe to `topic` and read until `want` records or an error; commit what was read.
    `group_protocol` "consumer": KIP-848's protocol, whose timeouts are the server's."""
    protocol = (
        {"group.protocol": "consumer"} if group_protocol == "consumer" else {"session.timeout.ms": 10000}
    )
    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **protocol,
        }
    )
    values: list[bytes] = []
    errors: list[KafkaError] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(values) < want and not errors:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(msg.error())
                continue
            values.append(msg.value())
        if values and not errors:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values, errors


def commit_error_codes(conf: dict[str, Any], group: str, offsets: list[TopicPartition]) -> list[int]:
    """Commit offsets without joining (a simple consumer); the error code per partition, or the whole call's."""
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        try:
            done = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            return [err.code()]
        return [tp.error.code() if tp.error is not None else 0 for tp in done]
    finally:
        consumer.close()


def group_ids(client: AdminClient) -> set[str]:
    result = client.list_consumer_groups(request_timeout=WAIT_S).result()
    return {g.group_id for g in result.valid}
