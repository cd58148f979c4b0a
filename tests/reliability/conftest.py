"""Fixtures for the reliability tests: the e2e server fixtures (tests/e2e/conftest.py: `server`,
`server_factory`) and the group-member pool (tests/e2e/groups/conftest.py: `members`), reused, not copied.

The helpers of tests/e2e (e2e_server, e2e_support), tests/e2e/groups (groups_support) and tests/crash
(test_crash_recovery's CrashServer) are put on sys.path for the tests here.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS / "e2e", TESTS / "e2e" / "groups", TESTS / "crash", TESTS / "reliability"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from e2e_support import load_conftest  # noqa: E402

_e2e = load_conftest(TESTS / "e2e" / "conftest.py")
_groups = load_conftest(TESTS / "e2e" / "groups" / "conftest.py")

server_factory = _e2e.server_factory
server = _e2e.server
members = _groups.members
