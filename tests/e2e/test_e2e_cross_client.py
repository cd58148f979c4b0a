"""Messages written by one client library are read back byte-identical by another."""

from __future__ import annotations

import pytest

from tests.support.e2e import create_topic, roundtrip

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("producer_lib", "consumer_lib"),
    [("ck", "kp"), ("kp", "ck"), ("aio", "ck"), ("ck", "aio")],
    ids=[
        "confluent-to-kafkapython",
        "kafkapython-to-confluent",
        "aiokafka-to-confluent",
        "confluent-to-aiokafka",
    ],
)
def test_cross_client_roundtrip(server, tmp_path, producer_lib, consumer_lib):
    topic, partitions = f"cross-{producer_lib}-{consumer_lib}", 3
    create_topic("ck", server, topic, partitions)
    roundtrip(producer_lib, consumer_lib, server, topic, partitions, n=500, seed=10, tmp_path=tmp_path)
