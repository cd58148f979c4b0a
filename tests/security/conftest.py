"""Fixtures for the security tests (helpers in security_support.py):

pki              CA, server certificate (127.0.0.1 / localhost) and alice's client certificate (PEM files)
secure_servers   start(settings, data_dir=None) -> SecureServer; stopped (SIGTERM) at teardown
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from security_support import Pki, SecureServers, make_pki  # noqa: E402


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def secure_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServers]:
    servers = SecureServers(tmp_path_factory.mktemp("kgc-secure"))
    yield servers
    failures = []
    for proc in servers.started:
        if proc.proc.poll() is not None and not proc.stopped:
            failures.append(f"server died during the test with code {proc.proc.returncode}\n{proc.output()}")
            continue
        code = proc.stop()
        if code != 0:
            failures.append(f"server exited with {code}\n{proc.output()}")
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
