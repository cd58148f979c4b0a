"""Fixtures for the Java compatibility tests: real Apache Kafka Java clients and tools against the server.

    server_factory           the shared fixture (tests/support/fixtures.py)
    server                   the e2e server behind a compat_matrix.RecordingProxy: its .bootstrap is the
                             proxy, which records the API versions each client.id used (the README's table)
    members                  the shared fixture (tests/support/fixtures.py)
    java_clients             session-scoped, parametrized over kafka-clients 3.9.x and 4.x: a JavaClients
                             (jar dir, classes compiled from java/*.java once per jar set, classpath, version)

Jar sets are fetched on first use by scripts/fetch-jars.sh (tests.support.java.fetch_jar_set; a no-op when cached)
into .deps/jars/ (git-ignored), or KGC_JARS_DIR. The tests skip when java or javac is not on PATH
(or mvn, when a jar set is not cached yet).
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import compat_matrix
import pytest

from tests.support.java import CLIENT_SETS, JAVA_SOURCES, JavaClients, fetch_jar_set, need_tools

COMPAT = Path(__file__).resolve().parent


@pytest.fixture
def server(server_factory, request, monkeypatch):
    # The server advertises the proxy (Metadata, FindCoordinator): all of a client's connections use it. The
    # proxy is one port, so the server runs one worker (with N, worker w would advertise the proxy's port + w).
    proxy = compat_matrix.RecordingProxy()
    with monkeypatch.context() as mp:
        mp.setenv("KGC_ADVERTISED_LISTENER", proxy.address)
        # Consumer-protocol (KIP-848) members heartbeat every second here, not Kafka's 5 s minimum, so that
        # each reconciliation step of the matrix takes a second.
        real = server_factory(
            {
                "coordinator.workers": 1,
                "group.consumer.min.heartbeat.interval.ms": 1000,
                "group.consumer.heartbeat.interval.ms": 1000,
                "group.consumer.min.session.timeout.ms": 20000,
                "group.consumer.session.timeout.ms": 20000,
            }
        )
    proxy.start(real.bootstrap)
    request.node.compat_proxy = proxy
    yield dataclasses.replace(real, bootstrap=proxy.address)
    proxy.close()


def pytest_collection_modifyitems(config, items):
    # Everything under tests/compat is the (slow) compatibility matrix: `pytest -m "not compat"` skips it.
    for item in items:
        if COMPAT in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.compat)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Outcomes of the tests that stand for matrix scenarios (compat_matrix.TEST_SCENARIOS) go to the results.
    outcome = yield
    compat_matrix.record_report(item, outcome.get_result())


@pytest.fixture(scope="session", params=CLIENT_SETS)
def java_clients(request, tmp_path_factory: pytest.TempPathFactory) -> JavaClients:
    set_name = request.param
    need_tools("java", "javac")
    jars = fetch_jar_set(set_name)
    version = (jars / ".complete").read_text().strip().rsplit(":", 1)[1]
    classes = tmp_path_factory.mktemp(f"classes-{set_name}")
    sources = sorted(str(p) for p in JAVA_SOURCES.glob("*.java"))
    proc = subprocess.run(
        ["javac", "-nowarn", "-Xlint:none", "-d", str(classes), "-cp", str(jars / "*"), *sources],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"javac against {set_name} failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return JavaClients(set_name, jars, classes, version)
