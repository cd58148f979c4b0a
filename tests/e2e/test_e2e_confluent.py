"""confluent-kafka (librdkafka) against the server, every client in its own process."""

from __future__ import annotations

import pytest

from tests.support.e2e import (
    check_consumed,
    check_consumed_in_order,
    check_delivered,
    consume,
    create_topic,
    make_messages,
    produce,
    run_client,
    write_messages,
)

pytestmark = pytest.mark.e2e

TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3


def test_admin_create_list_duplicate_delete(server, tmp_path):
    topic = "ck-admin-topic"
    created = run_client("ck", "create-topic", server, "--topic", topic, "--partitions", "3")
    assert created["error"] is None, created

    listing = run_client("ck", "list-topics", server)
    assert topic in listing["topics"], sorted(listing["topics"])
    t = listing["topics"][topic]
    assert t["error"] is None
    assert sorted(t["partitions"], key=int) == ["0", "1", "2"]
    host, port = server.bootstrap.rsplit(":", 1)
    assert {"id": 1, "host": host, "port": int(port)} in listing["brokers"], listing["brokers"]
    assert sorted(b["id"] for b in listing["brokers"]) == server.node_ids, listing["brokers"]
    for p in t["partitions"].values():
        assert p["error"] is None and p["leader"] == 1 and p["replicas"] == [1] and p["isrs"] == [1], p

    again = run_client("ck", "create-topic", server, "--topic", topic, "--partitions", "3")
    assert again["error"] is not None, "creating an existing topic succeeded"
    assert again["error"]["code"] == TOPIC_ALREADY_EXISTS, again["error"]
    assert again["error"]["name"] == "TOPIC_ALREADY_EXISTS"

    deleted = run_client("ck", "delete-topic", server, "--topic", topic)
    assert deleted["error"] is None, deleted
    listing = run_client("ck", "list-topics", server)
    assert topic not in listing["topics"], sorted(listing["topics"])

    gone = run_client("ck", "delete-topic", server, "--topic", topic)
    assert gone["error"] is not None and gone["error"]["code"] == UNKNOWN_TOPIC_OR_PARTITION, gone


def test_produce_acks_all_then_assign_consume(server, tmp_path):
    topic, partitions, n = "ck-roundtrip", 3, 1000
    create_topic("ck", server, topic, partitions)
    messages = make_messages(n, seed=1)
    delivered = produce("ck", server, topic, messages, tmp_path)
    placed = check_delivered(messages, delivered, partitions)
    consumed = consume("ck", server, topic, partitions, n, tmp_path)
    check_consumed(messages, placed, consumed, partitions)


@pytest.mark.parametrize("acks", ["0", "1"])
def test_produce_acks_0_and_1(server, tmp_path, acks):
    topic, partitions, n = f"ck-acks-{acks}", 3, 300
    create_topic("ck", server, topic, partitions)
    messages = make_messages(n, seed=4)
    for i, m in enumerate(messages):
        m["partition"] = i % partitions
    src = write_messages(tmp_path / "in.json", messages)
    delivered = run_client(
        "ck",
        "produce",
        server,
        "--topic",
        topic,
        "--input",
        str(src),
        "--acks",
        acks,
        output=tmp_path / "delivered.json",
    )["delivered"]
    assert all(d is not None and d["error"] is None for d in delivered), [d for d in delivered if d][:3]
    if acks == "1":
        check_delivered(messages, delivered, partitions)
    consumed = consume("ck", server, topic, partitions, n, tmp_path)
    check_consumed_in_order(messages, consumed, partitions)
