"""The one root conftest: the shared fixtures (tests/support/fixtures.py) for every suite."""

from tests.support.fixtures import members, server, server_factory

__all__ = ["members", "server", "server_factory"]
