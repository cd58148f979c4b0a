"""Exactly-once read-process-write through the front: a transactional job (confluent-kafka, and the Java client
4.x; KIP-447 group metadata) consumes through the front's group coordination and commits its offsets into the
cluster's transactions; SIGKILLed mid-way and started again, every input record's output is in the cluster exactly
once."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.java import fetch_jar_set, need_tools
from tests.support.kafka_cluster import cluster_committed, create_replicated_topic
from tests.support.members import high_watermarks, produce_batch, wait_for
from tests.support.server import PYTHON, REPO

pytestmark = pytest.mark.e2e

PARTITIONS = 3
JOB = Path(__file__).resolve().parent / "clients" / "eos_job.py"
JAVA_JOB = Path(__file__).resolve().parent / "java" / "EosJob.java"


@pytest.fixture(scope="session")
def java_eos_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """EosJob.java compiled against kafka-clients 4.x (scripts/fetch-jars.sh)."""
    need_tools("java", "javac")
    jars = fetch_jar_set("kafka-clients-4")
    classes = tmp_path_factory.mktemp("eos-job-classes")
    proc = subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", str(jars / "*"), str(JAVA_JOB)],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"javac EosJob.java failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return f"{classes}:{jars / '*'}"


def _job(cmd: list[str], run_dir: Path, name: str) -> subprocess.Popen:
    with open(run_dir / f"{name}.log", "wb") as log:
        return subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _command(
    kind: str, bootstrap: str, names: dict[str, str], idle: float, classpath: str | None
) -> list[str]:
    if kind == "java-4":
        assert classpath is not None
        return [
            "java",
            "-cp",
            classpath,
            "EosJob",
            bootstrap,
            names["group"],
            names["input"],
            names["output"],
            names["txid"],
            str(int(idle * 1000)),
        ]
    return [
        PYTHON,
        str(JOB),
        "--bootstrap",
        bootstrap,
        "--group",
        names["group"],
        "--input",
        names["input"],
        "--output",
        names["output"],
        "--transactional-id",
        names["txid"],
        "--idle",
        str(idle),
    ]


def _read_committed(bootstrap: str, topic: str, expect: int) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "front-eos-check", "isolation.level": "read_committed"}
    )
    out = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        quiet_until = None
        while time.monotonic() < deadline:
            got = [m for m in consumer.consume(500, 0.5) if not m.error()]
            out += [(m.partition(), m.key(), m.value()) for m in got]
            if len(out) >= expect:
                quiet_until = quiet_until or time.monotonic() + 2  # anything more would be a duplicate
                if time.monotonic() >= quiet_until:
                    break
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("kind", ["confluent-kafka", "java-4"])
def test_transactional_job_killed_and_restarted(front, direct, tmp_path, kind, request):
    classpath = request.getfixturevalue("java_eos_classpath") if kind == "java-4" else None
    names = {k: f"front-eos-{kind}-{k}" for k in ("group", "input", "output", "txid")}
    create_replicated_topic(front.bootstrap, names["input"], PARTITIONS)
    create_replicated_topic(front.bootstrap, names["output"], PARTITIONS)
    placed = produce_batch(front, names["input"], 2000, 51, tmp_path)
    keys = set(placed.values())

    def committed() -> dict[int, int]:
        return cluster_committed(direct.bootstrap, names["group"], names["input"], PARTITIONS)

    first = _job(_command(kind, front.bootstrap, names, 30, classpath), tmp_path, "job-1")
    wait_for(
        lambda: sum(committed().values()) >= 400,
        90,
        "the job's first transactions",
        lambda: (tmp_path / "job-1.log").read_text(errors="replace") + front.output(),
    )
    first.kill()
    first.wait(10)

    second = _job(_command(kind, front.bootstrap, names, 15, classpath), tmp_path, "job-2")
    try:
        second.wait(150)
    finally:
        if second.poll() is None:
            second.kill()
    log = (tmp_path / "job-2.log").read_text(errors="replace")
    assert second.returncode == 0, log + front.output()

    outputs = _read_committed(direct.bootstrap, names["output"], len(placed))
    counts = Counter(bytes(k).hex() for _, k, _ in outputs)
    duplicated = [k for k, n in counts.items() if n > 1]
    missing = keys - set(counts)
    assert not duplicated, f"{len(duplicated)} outputs written twice"
    assert not missing, f"{len(missing)} inputs without output"
    assert len(outputs) == len(placed)
    assert committed() == high_watermarks(placed, PARTITIONS)
