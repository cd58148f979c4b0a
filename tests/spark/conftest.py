"""Fixtures for the PySpark tests: one real SparkSession (local[2]) per test session, real servers per test.

    server, server_factory   the shared fixtures (tests/support/fixtures.py); every server
                             starts with group.initial.rebalance.delay.ms=0 (SPARK-53904: Spark's driver
                             polls for its first assignment for only 500 ms)
    spark_kafka_jars         session-scoped: the directory of Spark's Kafka connector jars for the installed
                             pyspark, fetched by scripts/fetch-spark-jars.sh into .deps/jars/ on first use
    spark                    session-scoped SparkSession: local[2], 2 shuffle partitions, UI off, the
                             connector jars on spark.jars, the legacy (group-joining) offset fetching of
                             Spark's Kafka source on, and this project's format("kgc") source registered

The tests skip when pyspark is not installed or java is not on PATH (and fail if the jars cannot be fetched).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import REPO

SPARK_TESTS = Path(__file__).resolve().parent
FETCH_SPARK_JARS = REPO / "scripts" / "fetch-spark-jars.sh"


# PySpark leaves its own local sockets to the JVM (py4j callbacks, collect()'s result socket) to the garbage
# collector: under filterwarnings=error their ResourceWarning would fail whichever test the GC ran in.
_PYSPARK_SOCKET_WARNINGS = (
    "ignore:unclosed <socket.socket:ResourceWarning",
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SPARK_TESTS in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            for spec in _PYSPARK_SOCKET_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def spark_kafka_jars() -> Path:
    pyspark = pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("the Spark tests need java on PATH")
    base = Path(os.environ.get("KGC_JARS_DIR", REPO / ".deps" / "jars"))
    out = base / f"spark-kafka-{pyspark.__version__}"
    if not (out / ".complete").exists():
        if shutil.which("mvn") is None:
            pytest.skip("fetching Spark's Kafka connector needs mvn on PATH")
        proc = subprocess.run(
            ["bash", str(FETCH_SPARK_JARS), pyspark.__version__, str(base)],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"scripts/fetch-spark-jars.sh failed ({proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}",
                pytrace=False,
            )
    return out


@pytest.fixture(scope="session")
def spark(spark_kafka_jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from spark_support import build_session

    session = build_session(spark_kafka_jars, tmp_path_factory.mktemp("spark-local"))
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
