"""Topics and records survive a graceful restart on the same --data-dir (partitions are segment files)."""

from __future__ import annotations

import pytest

from tests.support.e2e import (
    check_consumed,
    check_delivered,
    consume,
    create_topic,
    make_messages,
    produce,
    run_client,
)

pytestmark = pytest.mark.e2e


def test_records_survive_graceful_restart(server_factory, tmp_path):
    first = server_factory()
    topic, partitions, n = "restart-topic", 2, 300
    create_topic("ck", first, topic, partitions)
    messages = make_messages(n, seed=30)
    placed = check_delivered(messages, produce("ck", first, topic, messages, tmp_path), partitions)
    server_factory.stop(first)

    second = server_factory(data_dir=first.data_dir)
    listing = run_client("ck", "list-topics", second)
    assert topic in listing["topics"] and len(listing["topics"][topic]["partitions"]) == partitions, listing
    check_consumed(messages, placed, consume("ck", second, topic, partitions, n, tmp_path), partitions)
