"""format("kgc")'s Spark Kafka-source options, each checked against Spark's own source (spark-sql-kafka-0-10) on
the same data in the same SparkSession:
- batch reads (spark.read) with startingOffsets/endingOffsets as names, JSON and timestamps, includeHeaders and
  minPartitions (the same rows, the same task count);
- a stream's maxOffsetsPerTrigger with startingOffsets as JSON (the same micro-batch sizes), and a stream from a
  timestamp with headers (the same rows);
- failOnDataLoss on a topic whose first records retention deleted: both fail with true, both read the same
  records with false; an executor's read of offsets deleted after planning fails or skips them.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import CaseInsensitiveDict
from spark_support import Collector, create_topic, stop_all, wait_until

from kgc_spark.source import KafkaRange, SourceOptions, read_range
from tests.support.fixtures import ServerFactory

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_PARTITION = 20
BASE_TS = 1_700_000_000_000  # record i of each partition has timestamp BASE_TS + i * 1000
COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "timestampType"]


def _produce_timed(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce(
                topic,
                key=f"k{i}".encode(),
                value=f"v-{p}-{i}".encode(),
                partition=p,
                timestamp=BASE_TS + i * 1000,
                headers=[("h1", f"{p}-{i}".encode()), ("h2", None)] if i % 2 == 0 else [("only", b"x")],
            )
    assert producer.flush(60) == 0


@pytest.fixture(scope="module")
def module_servers(tmp_path_factory):
    """Servers shared by this module's tests (the data they hold is only read)."""
    factory = ServerFactory(tmp_path_factory.mktemp("kgc-opts-server"))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def timed_topic(module_servers):
    server = module_servers()
    topic = f"kgc-opts-{uuid.uuid4().hex[:8]}"
    create_topic(server.bootstrap, topic, PARTITIONS)
    _produce_timed(server.bootstrap, topic)
    return server, topic


def _read(spark, fmt: str, bootstrap: str, topic: str, options: dict[str, str], columns=COLUMNS):
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    rows = sorted(tuple(r[c] for c in columns) for r in df.select(*columns).collect())
    return df, rows


def _all_partitions(topic: str, values: list[int]) -> str:
    return json.dumps({topic: {str(p): v for p, v in enumerate(values)}})


def _ts(i: int) -> int:
    return BASE_TS + i * 1000


@pytest.mark.parametrize(
    "name, options",
    [
        ("earliest to latest (the defaults)", {}),
        (
            "JSON offsets with -2 and -1",
            {"startingOffsets": "{S}", "endingOffsets": "{E}"},
        ),
        (
            "offsets by timestamp per partition",
            {"startingOffsetsByTimestamp": "{ST}", "endingOffsetsByTimestamp": "{ET}"},
        ),
        ("one timestamp for all", {"startingTimestamp": str(_ts(7)), "endingTimestamp": str(_ts(12))}),
        (
            "a timestamp after every record, strategy latest",
            {"startingTimestamp": str(_ts(99)), "startingOffsetsByTimestampStrategy": "latest"},
        ),
    ],
)
def test_batch_reads_return_what_sparks_kafka_source_returns(spark, timed_topic, name, options):
    server, topic = timed_topic
    templates = {
        "{S}": _all_partitions(topic, [5, -2, 10]),
        "{E}": _all_partitions(topic, [15, -1, 12]),
        "{ST}": _all_partitions(topic, [_ts(5), _ts(0), _ts(19)]),
        "{ET}": _all_partitions(topic, [_ts(15), _ts(3), _ts(19)]),
    }
    options = {k: templates.get(v, v) for k, v in options.items()}
    _, ours = _read(spark, "kgc", server.bootstrap, topic, options)
    _, spark_kafka = _read(spark, "kafka", server.bootstrap, topic, options)
    assert ours == spark_kafka, name
    if name.startswith("earliest"):
        assert len(ours) == PARTITIONS * PER_PARTITION
    if name.startswith("one timestamp"):
        assert {r[2] for r in ours} == set(range(7, 12))  # [7, 12): the ending timestamp's offset is excluded


def test_batch_read_headers_and_min_partitions_as_sparks_kafka_source(spark, timed_topic):
    server, topic = timed_topic
    options = {"includeHeaders": "true", "minPartitions": "7"}
    columns = [*COLUMNS, "headers"]
    df, ours = _read(spark, "kgc", server.bootstrap, topic, options, columns)
    kafka_df, spark_kafka = _read(spark, "kafka", server.bootstrap, topic, options, columns)
    assert df.schema["headers"].dataType == kafka_df.schema["headers"].dataType
    assert ours == spark_kafka
    first = next(r for r in ours if r[1] == 1 and r[2] == 0)
    assert [(h["key"], h["value"]) for h in first[-1]] == [("h1", b"1-0"), ("h2", None)]
    # Spark's own cut (3 x 20 offsets, 7 wanted: round(2.33) = 2 tasks each), the same task count from both.
    assert df.rdd.getNumPartitions() == kafka_df.rdd.getNumPartitions() == 6


def _stream_both(spark, server, topic, tmp_path, options, columns, count, settle_s=0.0):
    """A kgc and a Spark Kafka streaming query with the same options, each collecting `columns`, until each has
    read `count` rows (and `settle_s` more); returns {format: Collector} and {format: rows per micro-batch}."""
    collectors = {"kgc": Collector(columns), "kafka": Collector(columns)}
    sizes: dict[str, list[int]] = {"kgc": [], "kafka": []}
    queries = []
    try:
        for fmt, collector in collectors.items():
            reader = (
                spark.readStream.format(fmt)
                .option("kafka.bootstrap.servers", server.bootstrap)
                .option("subscribe", topic)
                .option("kafka.group.id", f"opts-{fmt}-{uuid.uuid4().hex[:6]}")
            )
            for k, v in options.items():
                reader = reader.option(k, v)

            def per_batch(batch_df, batch_id, collector=collector, fmt=fmt):
                before = len(collector.snapshot())
                collector(batch_df, batch_id)
                sizes[fmt].append(len(collector.snapshot()) - before)

            queries.append(
                reader.load()
                .writeStream.foreachBatch(per_batch)
                .option("checkpointLocation", str(tmp_path / fmt))
                .trigger(processingTime="200 milliseconds")
                .start()
            )
        for fmt, collector in collectors.items():
            wait_until(lambda c=collector: len(c.snapshot()) >= count, f"{fmt}: {count} rows read")
        time.sleep(settle_s)
    finally:
        stop_all(*queries)
    return collectors, sizes


def test_max_offsets_per_trigger_cuts_the_same_micro_batches_as_sparks_kafka_source(
    spark, timed_topic, tmp_path
):
    server, topic = timed_topic
    starting = _all_partitions(topic, [2, -2, 5])
    expected = {(p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)} - {
        (0, 0),
        (0, 1),
        *((2, i) for i in range(5)),
    }
    options = {"startingOffsets": starting, "maxOffsetsPerTrigger": "10"}
    collectors, sizes = _stream_both(
        spark, server, topic, tmp_path, options, ("partition", "offset"), len(expected), settle_s=1.0
    )
    for fmt, collector in collectors.items():
        rows = collector.snapshot()
        assert sorted(rows) == sorted(expected), f"{fmt}: every record from startingOffsets, exactly once"
    ours = [n for n in sizes["kgc"] if n]
    theirs = [n for n in sizes["kafka"] if n]
    assert ours == theirs, (ours, theirs)
    assert max(ours) <= 10 and len(ours) > 2


def test_a_stream_from_a_timestamp_with_headers_reads_what_sparks_kafka_source_reads(
    spark, timed_topic, tmp_path
):
    server, topic = timed_topic
    columns = ("partition", "offset", "timestampType", "headers")
    expected = PARTITIONS * (PER_PARTITION - 12)  # records 12.. of each partition
    options = {"startingTimestamp": str(_ts(12)), "includeHeaders": "true"}
    collectors, _ = _stream_both(spark, server, topic, tmp_path, options, columns, expected)

    def rows(fmt):
        return sorted(
            (p, o, t, tuple((h["key"], h["value"]) for h in hs)) for p, o, t, hs in collectors[fmt].snapshot()
        )

    assert rows("kgc") == rows("kafka")
    assert len(rows("kgc")) == expected and {r[1] for r in rows("kgc")} == set(range(12, PER_PARTITION))


# -- failOnDataLoss -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trimmed_topic(module_servers):
    """A one-partition topic whose first records retention has deleted (small segments, retention.bytes 1)."""
    server = module_servers({"log.retention.check.interval.ms": 200})
    topic = f"kgc-loss-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    config = {"segment.bytes": "2048", "retention.bytes": "1"}
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(120):
        producer.produce(topic, key=b"k", value=b"x" * 100 + str(i).encode(), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "watermarks"})
    try:
        seen: list[tuple[int, int]] = []

        def trimmed_and_still():
            marks = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
            seen.append(marks)
            return marks[0] > 0 and len(seen) > 3 and seen[-2] == marks and seen[-4] == marks

        wait_until(trimmed_and_still, "retention to delete the first segments", interval_s=0.3)
    finally:
        consumer.close()
    return server, topic, seen[-1]


def test_fail_on_data_loss_as_sparks_kafka_source(spark, trimmed_topic):
    server, topic, (low, high) = trimmed_topic
    from_zero = {"startingOffsets": json.dumps({topic: {"0": 0}})}
    for fmt in ("kgc", "kafka"):
        with pytest.raises(Exception, match="failOnDataLoss"):
            _read(spark, fmt, server.bootstrap, topic, {**from_zero, "failOnDataLoss": "true"})
    lenient = {**from_zero, "failOnDataLoss": "false"}
    _, ours = _read(spark, "kgc", server.bootstrap, topic, lenient)
    _, spark_kafka = _read(spark, "kafka", server.bootstrap, topic, lenient)
    assert ours == spark_kafka
    assert [r[2] for r in ours] == list(range(low, high))


def test_an_executor_read_of_deleted_offsets_fails_or_skips_them(trimmed_topic):
    # What a streaming task meets when retention deletes its range after planning: the read itself decides.
    server, topic, (low, high) = trimmed_topic
    base = {"kafka.bootstrap.servers": server.bootstrap, "subscribe": topic, "kafka.group.id": "loss"}
    part = KafkaRange(topic, 0, 0, high)
    strict = SourceOptions.parse(CaseInsensitiveDict(base))
    with pytest.raises(RuntimeError, match="out of range"):
        list(read_range(strict, part))
    lenient = SourceOptions.parse(CaseInsensitiveDict({**base, "failOnDataLoss": "false"}))
    offsets = [o for batch in read_range(lenient, part) for o in batch.column("offset").to_pylist()]
    assert offsets == list(range(low, high))
