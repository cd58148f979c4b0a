"""Exactly-once read-process-write through the front: a transactional job (confluent-kafka, KIP-447 group
metadata) consumes through the front's group coordination and commits its offsets into the cluster's
transactions; SIGKILLed mid-way and started again, every input record's output is in the cluster exactly once."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.kafka_cluster import cluster_committed, create_replicated_topic
from tests.support.members import high_watermarks, produce_batch, wait_for
from tests.support.server import PYTHON, REPO

pytestmark = pytest.mark.e2e

PARTITIONS = 3
JOB = Path(__file__).resolve().parent / "clients" / "eos_job.py"


def _job(front, run_dir: Path, name: str, idle: float) -> subprocess.Popen:
    with open(run_dir / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [
                PYTHON,
                str(JOB),
                "--bootstrap",
                front.bootstrap,
                "--group",
                "front-eos",
                "--input",
                "front-eos-in",
                "--output",
                "front-eos-out",
                "--transactional-id",
                "front-eos-job",
                "--idle",
                str(idle),
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


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


def test_transactional_job_killed_and_restarted(front, direct, tmp_path):
    create_replicated_topic(front.bootstrap, "front-eos-in", PARTITIONS)
    create_replicated_topic(front.bootstrap, "front-eos-out", PARTITIONS)
    placed = produce_batch(front, "front-eos-in", 2000, 51, tmp_path)
    keys = {k for k in placed.values()}

    first = _job(front, tmp_path, "job-1", idle=30)
    wait_for(
        lambda: (
            sum(cluster_committed(direct.bootstrap, "front-eos", "front-eos-in", PARTITIONS).values()) >= 400
        ),
        60,
        "the job's first transactions",
        lambda: (tmp_path / "job-1.log").read_text(errors="replace") + front.output(),
    )
    first.kill()
    first.wait(10)

    second = _job(front, tmp_path, "job-2", idle=15)
    try:
        second.wait(120)
    finally:
        if second.poll() is None:
            second.kill()
    log = (tmp_path / "job-2.log").read_text(errors="replace")
    assert second.returncode == 0, log + front.output()

    outputs = _read_committed(direct.bootstrap, "front-eos-out", len(placed))
    counts = Counter(bytes(k).hex() for _, k, _ in outputs)
    duplicated = [k for k, n in counts.items() if n > 1]
    missing = keys - set(counts)
    assert not duplicated, f"{len(duplicated)} outputs written twice"
    assert not missing, f"{len(missing)} inputs without output"
    assert len(outputs) == len(placed)
    assert cluster_committed(direct.bootstrap, "front-eos", "front-eos-in", PARTITIONS) == high_watermarks(
        placed, PARTITIONS
    )
