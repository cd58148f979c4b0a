"""The fixtures every suite shares (made available to all tests by tests/conftest.py):

    server          a server with the default e2e settings (group.initial.rebalance.delay.ms=0)
    server_factory  start(settings={...}, data_dir=None) -> ServerProcess, for custom settings or a restart on
                    an existing data dir; every server it started is stopped (SIGTERM, <= STOP_TIMEOUT_S) at
                    teardown
    members         a tests.support.members.Members: start(lib, name, server, group, topic, ...) runs one group
                    member in its own process; members still running at teardown are killed (before the server
                    is stopped)
    kafka_cluster   session-scoped: a real 3-node Apache Kafka 4.x cluster (tests.support.kafka_cluster)
    front           a server in front of that cluster (upstream.bootstrap.servers)

A ServerProcess (tests.support.server) has .bootstrap ("127.0.0.1:PORT"), .admin_url ("http://127.0.0.1:PORT"),
.proc, .data_dir. Teardown fails the test if the server died during it, did not exit within STOP_TIMEOUT_S of
SIGTERM (it is then killed), or exited non-zero.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.kafka_cluster import KafkaCluster
from tests.support.members import Members
from tests.support.server import (
    STOP_TIMEOUT_S,
    ServerProcess,
    ServerStartError,
    ServerStopError,
    start_server,
)


class ServerFactory:
    def __init__(self, base: Path) -> None:
        self._base = base
        self._counter = itertools.count(1)
        self.started: list[ServerProcess] = []

    def __call__(
        self,
        settings: Mapping[str, object] | None = None,
        *,
        data_dir: Path | None = None,
        **kw_settings: object,
    ) -> ServerProcess:
        merged = dict(settings or {})
        merged.update(kw_settings)
        run_dir = self._base / f"server{next(self._counter)}"
        try:
            server = start_server(run_dir, merged, data_dir=data_dir)
        except ServerStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.started.append(server)
        return server

    def stop(self, server: ServerProcess) -> int:
        """Stop one server now (SIGTERM); fail unless it exits cleanly within STOP_TIMEOUT_S."""
        return _stop_checked(server)

    def stop_all(self) -> None:
        """Stop every server this factory started; fail (after stopping them all) if any did not stop cleanly."""
        errors = []
        for server in self.started:
            try:
                _stop_checked(server)
            except pytest.fail.Exception as exc:
                errors.append(str(exc))
        if errors:
            pytest.fail("\n\n".join(errors), pytrace=False)

    def restart_on_same_port(self, server: ServerProcess) -> ServerProcess:
        """Stop the server and start it again on its data dir and Kafka port, so running clients reconnect."""
        self.stop(server)
        for attempt in range(20):
            try:
                again = start_server(
                    Path(server.run_dir).parent / f"{Path(server.run_dir).name}-again{attempt}",
                    server.settings,
                    data_dir=server.data_dir,
                    extra_args=["--listen", server.bootstrap],
                )
            except ServerStartError:
                time.sleep(0.5)  # the port may still be held for a moment
                continue
            self.started.append(again)
            return again
        pytest.fail(f"could not restart the server on {server.bootstrap}")


def _stop_checked(server: ServerProcess) -> int:
    if server.proc.poll() is not None:
        if server.stopped:
            return server.proc.returncode
        pytest.fail(
            f"server pid {server.proc.pid} died during the test with code {server.proc.returncode}\n"
            f"{server.output()}",
            pytrace=False,
        )
    try:
        code = server.stop(STOP_TIMEOUT_S)
    except ServerStopError as exc:
        pytest.fail(str(exc), pytrace=False)
    if code != 0:
        pytest.fail(
            f"server exited with code {code} after SIGTERM (graceful shutdown should exit 0)\n"
            f"{server.output()}",
            pytrace=False,
        )
    return code


@pytest.fixture
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path_factory.mktemp("kgc-server"))
    yield factory
    factory.stop_all()


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    return server_factory()


@pytest.fixture
def members(server_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Members]:
    # Depending on server_factory makes this fixture's teardown run first: members die before the server stops.
    pool = Members(tmp_path_factory.mktemp("members"))
    yield pool
    pool.cleanup()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A real Apache Kafka 4.x cluster of three KRaft nodes (tests.support.kafka_cluster), started once per test
    run, for the server in front of a cluster (tests/front/, and the Spark jobs run through the front)."""
    try:
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    except RuntimeError as exc:
        pytest.fail(f"the Kafka cluster did not start: {exc}", pytrace=False)
    yield cluster
    cluster.close()


@pytest.fixture
def front(server_factory: ServerFactory, kafka_cluster: KafkaCluster) -> ServerProcess:
    """A server in front of `kafka_cluster` (upstream.bootstrap.servers)."""
    return server_factory({"upstream.bootstrap.servers": kafka_cluster.bootstrap})
