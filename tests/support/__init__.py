"""What the test suites share: the server as a subprocess (server.py), the one raw wire client (wire.py), group
members in their own processes and the waits around them (members.py), e2e helpers (e2e.py), and the fixtures
(fixtures.py, made available to every test by tests/conftest.py)."""
