"""Fixtures for the storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from storage.fakefs import MemFS
from tests.unit.storage.support import DIR, Logs


@pytest.fixture
def logs() -> Iterator[Logs]:
    """Opens logs, and closes them all at teardown."""
    opened = Logs()
    yield opened
    opened.close_all()


@pytest.fixture
def memfs() -> MemFS:
    fs = MemFS()
    fs.makedirs(DIR)
    return fs
