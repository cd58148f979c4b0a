"""The one root conftest: the shared fixtures (tests/support/fixtures.py) for every suite."""

from tests.support.fixtures import front, kafka_cluster, members, server, server_factory

__all__ = ["front", "kafka_cluster", "members", "server", "server_factory"]
