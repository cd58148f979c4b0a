"""Helpers for the PySpark tests: the SparkSession, topics, producing, the group as the server sees it."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

# Generous: two cores shared by several test suites, and a JVM.
WAIT_S = 150.0
# What Kafka's own admin client asks again (after looking the coordinator up anew); librdkafka's hands them to the
# caller. In front of a cluster a shard answers COORDINATOR_NOT_AVAILABLE while its lease on the state topic is
# unconfirmed (a loaded cluster), as Kafka does while a coordinator moves.
COORDINATOR_RETRIABLE = frozenset(
    {
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
    }
)


def build_session(jars_dir: Path, local_dir: Path):
    from pyspark.sql import SparkSession

    import kgc_spark

    # Spark starts its Python workers with PYSPARK_PYTHON (default: `python3` on PATH): make it this venv's.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    jars = ",".join(str(p) for p in sorted(jars_dir.glob("*.jar")))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kgc-spark-tests")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.local.dir", str(local_dir))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    kgc_spark.register(session)
    return session


def wait_until(
    predicate: Callable[[], object], what: str, timeout_s: float = WAIT_S, interval_s: float = 0.5
):
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(timeout=60)


def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str
) -> set[tuple[int, str]]:
    """per_partition records to each partition, values f"{tag}-{partition}-{i}"; returns those values."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = set()
    for i in range(per_partition):
        for p in range(partitions):
            value = f"{tag}-{p}-{i}"
            producer.produce(topic, key=f"k{i % 5}".encode(), value=value.encode(), partition=p)
            sent.add((p, value))
    assert producer.flush(60) == 0, "producer did not deliver everything"
    return sent


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kgc-spark-tests-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _asked_again(ask: Callable[[], object], timeout_s: float = 30.0):
    """ask(), asked again for timeout_s while the coordinator answers a retriable coordinator error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ask()
        except KafkaException as exc:
            if exc.args[0].code() not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch through the admin client)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = _asked_again(
        lambda: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(
            timeout=30
        )
    )
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def describe_group(bootstrap: str, group: str):
    """DescribeGroups through confluent-kafka's AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return _asked_again(lambda: admin.describe_consumer_groups([group])[group].result(timeout=30))


def member_assignments(bootstrap: str, group: str) -> dict[str, set[tuple[str, int]]]:
    """{group.instance.id or member id: {(topic, partition)}} of a Stable group, else {}."""
    desc = describe_group(bootstrap, group)
    if str(desc.state).rsplit(".", 1)[-1] != "STABLE":
        return {}
    return {
        (m.group_instance_id or m.member_id): {
            (tp.topic, tp.partition) for tp in m.assignment.topic_partitions
        }
        for m in desc.members
    }


def admin_get(admin_url: str, path: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(admin_url + path, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def admin_post(admin_url: str, path: str, body: object | None = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(
        admin_url + path, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


class Collector:
    """A foreachBatch sink that keeps every row in this (the driver's) process."""

    def __init__(self, columns: Iterable[str] = ("partition", "offset", "value")) -> None:
        self.columns = tuple(columns)
        self._lock = threading.Lock()
        self.rows: list[tuple] = []
        self.batches: list[int] = []

    def __call__(self, batch_df, batch_id: int) -> None:
        rows = [tuple(r[c] for c in self.columns) for r in batch_df.select(*self.columns).collect()]
        with self._lock:
            self.rows.extend(rows)
            self.batches.append(batch_id)

    def snapshot(self) -> list[tuple]:
        with self._lock:
            return list(self.rows)


def stop_all(*queries) -> None:
    for q in queries:
        if q is not None and q.isActive:
            q.stop()
