"""Compressed batches are stored as sent and come back byte-identical, across codecs and client libraries."""

from __future__ import annotations

import pytest

from tests.support.e2e import create_topic, roundtrip

pytestmark = pytest.mark.e2e


def test_confluent_every_codec(server, tmp_path):
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        topic = f"codec-{codec}"
        create_topic("ck", server, topic, 2)
        roundtrip("ck", "ck", server, topic, 2, n=300, seed=50, tmp_path=tmp_path,
                  producer_args=("--set", f"compression.type={codec}"))  # fmt: skip


@pytest.mark.parametrize(
    ("producer_lib", "consumer_lib", "setting"),
    [
        ("ck", "kp", "compression.type=gzip"),
        ("kp", "ck", "compression_type=gzip"),
        ("aio", "ck", "compression_type=gzip"),
    ],
    ids=["confluent-to-kafkapython", "kafkapython-to-confluent", "aiokafka-to-confluent"],
)
def test_gzip_across_clients(server, tmp_path, producer_lib, consumer_lib, setting):
    topic = f"gzip-{producer_lib}-{consumer_lib}"
    create_topic("ck", server, topic, 2)
    roundtrip(producer_lib, consumer_lib, server, topic, 2, n=300, seed=51, tmp_path=tmp_path,
              producer_args=("--set", setting))  # fmt: skip
