"""kafka-python 3.x against the server with its own API version negotiation (no api_version pin)."""

from __future__ import annotations

import pytest

from tests.support.e2e import check_consumed, check_delivered, consume, make_messages, produce, run_client

pytestmark = pytest.mark.e2e


def test_admin_create_produce_assign_consume(server, tmp_path):
    topic, partitions, n = "kp-roundtrip", 3, 1000
    created = run_client("kp", "create-topic", server, "--topic", topic, "--partitions", str(partitions))
    assert created["error"] is None, created
    assert topic in created["topics"], created["topics"]

    again = run_client("kp", "create-topic", server, "--topic", topic, "--partitions", str(partitions))
    assert again["error"] is not None and again["error"]["name"] == "TopicAlreadyExistsError", again

    messages = make_messages(n, seed=2)
    delivered = produce("kp", server, topic, messages, tmp_path)
    placed = check_delivered(messages, delivered, partitions)
    consumed = consume("kp", server, topic, partitions, n, tmp_path)
    check_consumed(messages, placed, consumed, partitions)
