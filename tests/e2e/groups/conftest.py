"""Fixtures for the consumer-group e2e tests (the server fixtures come from tests/e2e/conftest.py).

members   a groups_support.Members: start(lib, name, server, group, topic, ...) runs one group member in its
          own process; members still running at teardown are killed (before the server is stopped)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from groups_support import Members


@pytest.fixture
def members(server_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Members]:
    # Depending on server_factory makes this fixture's teardown run first: members die before the server stops.
    pool = Members(tmp_path_factory.mktemp("members"))
    yield pool
    pool.cleanup()
