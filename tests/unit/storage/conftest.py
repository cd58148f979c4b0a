"""Fixtures for the storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import storage.format
from storage.fakefs import MemFS
from tests.unit.storage.support import DIR, Logs


@pytest.fixture(autouse=True, params=["compiled", "python"])
def parse_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every storage test runs twice: with the compiled inner loop of storage.format.parse (storage._speedups)
    and with its pure-Python loop, which must behave the same. The compiled one is built by every install
    with a C compiler (CI has one): its absence there is a failure, not a skip."""
    if request.param == "compiled":
        if storage.format._speedups is None:
            pytest.fail("storage._speedups is not built (pip install -e . builds it where gcc is installed)")
    else:
        monkeypatch.setattr(storage.format, "_speedups", None)
    return str(request.param)


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
