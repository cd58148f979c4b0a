"""Fixtures for the server in front of a real cluster (coordinator.front):

kafka_cluster   session-scoped: Apache Kafka 4.x, three KRaft nodes (tests.support.kafka_cluster), started once
                per test run
direct          the cluster as a client reaches it without the server (.bootstrap, .output()): what the
                e2e helpers take as a "server"
front           a server in front of that cluster (upstream.bootstrap.servers), one per test
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.support.kafka_cluster import NODE_IDS, KafkaCluster


@dataclasses.dataclass
class Direct:
    bootstrap: str
    cluster: KafkaCluster

    def output(self) -> str:
        return "\n".join(f"--- kafka node {n} ---\n{self.cluster.log_tail(n)[-1500:]}" for n in NODE_IDS)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    try:
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    except RuntimeError as exc:
        pytest.fail(f"the Kafka cluster did not start: {exc}", pytrace=False)
    yield cluster
    cluster.close()


@pytest.fixture
def direct(kafka_cluster: KafkaCluster) -> Direct:
    return Direct(kafka_cluster.bootstrap, kafka_cluster)


@pytest.fixture
def front(server_factory, kafka_cluster):
    return server_factory({"upstream.bootstrap.servers": kafka_cluster.bootstrap})
