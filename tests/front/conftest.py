"""Fixtures for the server in front of a real cluster (coordinator.front), besides the shared `kafka_cluster` and
`front` (tests/support/fixtures.py):

    direct          the cluster as a client reaches it without the server (.bootstrap, .output()): what the
                    e2e helpers take as a "server"
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.kafka_cluster import NODE_IDS, KafkaCluster


@dataclasses.dataclass
class Direct:
    bootstrap: str
    cluster: KafkaCluster

    def output(self) -> str:
        return "\n".join(f"--- kafka node {n} ---\n{self.cluster.log_tail(n)[-1500:]}" for n in NODE_IDS)


@pytest.fixture
def direct(kafka_cluster: KafkaCluster) -> Direct:
    return Direct(kafka_cluster.bootstrap, kafka_cluster)
