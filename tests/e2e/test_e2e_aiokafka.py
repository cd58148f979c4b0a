"""aiokafka against the server: AIOKafkaProducer and an assign()-only AIOKafkaConsumer."""

from __future__ import annotations

import pytest

from tests.support.e2e import (
    check_consumed,
    check_delivered,
    consume,
    create_topic,
    make_messages,
    produce,
)

pytestmark = pytest.mark.e2e


def test_produce_assign_consume(server, tmp_path):
    topic, partitions, n = "aio-roundtrip", 3, 1000
    create_topic("kp", server, topic, partitions)
    messages = make_messages(n, seed=3)
    delivered = produce("aio", server, topic, messages, tmp_path)
    placed = check_delivered(messages, delivered, partitions)
    consumed = consume("aio", server, topic, partitions, n, tmp_path)
    check_consumed(messages, placed, consumed, partitions)
