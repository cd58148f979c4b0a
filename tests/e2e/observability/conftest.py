"""Fixtures for the observability e2e tests (the shared ones come from tests/support/fixtures.py).

members   an obs_support.Members: start(name, server, group, topic, *member_args) runs clients/member.py in
          its own process; members still running at teardown are killed before the server stops
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from obs_support import Members


@pytest.fixture
def members(server_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Members]:
    pool = Members(tmp_path_factory.mktemp("obs-members"))
    yield pool
    pool.cleanup()
