"""examples/pipeline.py end to end: kgc source -> per-key, per-minute aggregation, watermarked -> a topic."""

from __future__ import annotations

import datetime
import importlib.util
import json
import sys
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from spark_support import committed_offsets, high_watermarks, stop_all, wait_until

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
MINUTE_MS = 60_000


def _load_example():
    name = "kgc_example_pipeline"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _read_topic(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kgc-example-reader",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    out = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        eof: set[int] = set()
        while len(eof) < partitions:
            msg = consumer.poll(10)
            assert msg is not None, "reading the sink topic stalled"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                eof.add(msg.partition())
                continue
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def test_example_pipeline_aggregates_per_key_and_minute_into_a_topic(spark, server, tmp_path):
    example = _load_example()
    source, sink = f"events-{uuid.uuid4().hex[:8]}", f"event-counts-{uuid.uuid4().hex[:8]}"
    group = f"example-{uuid.uuid4().hex[:8]}"
    example.ensure_topics(server.bootstrap, {source: 3, sink: 3})

    # Events in two known minutes, keys spread over the partitions; the expected totals are computed here.
    base = (1_790_000_000_000 // MINUTE_MS) * MINUTE_MS
    expected: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0.0])
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(90):
        key = f"sensor-{i % 4}"
        ts = base + (i % 2) * MINUTE_MS + (i * 500) % MINUTE_MS
        amount = float(i % 10)
        producer.produce(
            source,
            key=key.encode(),
            value=json.dumps({"amount": amount}).encode(),
            timestamp=ts,
            partition=i % 3,
        )
        slot = expected[(key, ts - ts % MINUTE_MS)]
        slot[0] += 1
        slot[1] += amount
    assert producer.flush(60) == 0

    query = None
    try:
        query = example.start_pipeline(
            spark,
            bootstrap=server.bootstrap,
            source=source,
            sink=sink,
            group=group,
            query_name=f"example-{group}",
            checkpoint=tmp_path / "checkpoint",
            trigger="500 milliseconds",
        )

        def latest_aggregates():
            latest = {}
            for key, value in _read_topic(server.bootstrap, sink, 3):
                latest[key.decode()] = json.loads(value)
            return latest

        def complete():
            latest = latest_aggregates()
            return latest if len(latest) == len(expected) else None

        latest = wait_until(complete, "an aggregate for every key and minute in the sink topic")
        got = {}
        for doc in latest.values():
            start_ms = int(datetime.datetime.fromisoformat(doc["window_start"]).timestamp() * 1000)
            got[(doc["key"], start_ms)] = [doc["count"], doc["amount"]]
        assert got == {k: [v[0], v[1]] for k, v in expected.items()}
        for key, doc in latest.items():
            assert key == f"{doc['key']}|{doc['window_start']}"
        # The pipeline's group committed its progress: the whole input.
        ends = high_watermarks(server.bootstrap, source, 3)
        wait_until(
            lambda: committed_offsets(server.bootstrap, group) == {(source, p): ends[p] for p in range(3)},
            "the pipeline's group to commit the end of the input",
        )
        assert (tmp_path / "checkpoint" / "offsets").is_dir() and (
            tmp_path / "checkpoint" / "commits"
        ).is_dir()
        assert query.isActive and query.exception() is None
    finally:
        stop_all(query)
