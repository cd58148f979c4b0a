"""The one root conftest: the shared fixtures (tests/support/fixtures.py) for every suite."""

from tests.support.fixtures import front, kafka_cluster, members, server, server_factory

__all__ = ["front", "kafka_cluster", "members", "server", "server_factory"]


def pytest_collection_modifyitems(session, config, items):
    # The tests that use the 3-node Kafka cluster (tests/front, the matrix and Spark through the front) run last,
    # together: the cluster's three JVMs start with the first of them and no other test shares the machine with
    # them (timing-sensitive suites ran slower beside an idle cluster).
    uses = [item for item in items if "kafka_cluster" in getattr(item, "fixturenames", ())]
    if uses:
        chosen = set(uses)
        items[:] = [item for item in items if item not in chosen] + uses
