"""A PySpark Structured Streaming pipeline whose reader is a consumer-group member of the coordinator.

    events topic --(format "kgc": the driver is a static member of group `--group`)-->
        per-key, per-minute count and sum, with a 1-minute watermark on the record timestamp -->
    foreachBatch: confluent-kafka producer --> aggregates topic (key "<key>|<window start>", JSON value)

The query is checkpointed (`--checkpoint`), so a restart under the same name resumes where it stopped and
keeps its place in the group (its group.instance.id comes from `--query-name`). Every completed micro-batch's
end offsets are committed to the group, so `kafka-group-coordinator groups describe <group>`, /metrics and any
lag tool show how far behind the pipeline is.

    make serve                                                  # one shell
    .venv/bin/python examples/pipeline.py --bootstrap 127.0.0.1:9092 --demo-events 500   # another
    make example                                                # the same

Input values are JSON objects with an optional numeric "amount" ({"amount": 12.5}); anything else counts with
amount 0. Output values: {"key", "window_start", "window_end", "count", "amount"} (update mode: a window's row
is re-sent, with the same Kafka key, each time a batch changes it; the last one per key is the current total).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

DEFAULTS = {
    "source": "events",
    "sink": "event-counts",
    "group": "example-pipeline",
    "query_name": "event-counts",
    "checkpoint": "data/example-pipeline-checkpoint",
}
VALUE_SCHEMA = "amount double"


def build_session(app_name: str = "kgc-example-pipeline"):
    """A local SparkSession (2 cores) with the kgc source registered. The kgc source and the foreachBatch sink
    need no JVM-side Kafka connector."""
    from pyspark.sql import SparkSession

    import kgc_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    kgc_spark.register(spark)
    return spark


def ensure_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create the topics that do not exist yet ({name: partitions})."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    new = [NewTopic(name, partitions, 1) for name, partitions in topics.items() if name not in existing]
    for future in admin.create_topics(new, operation_timeout=30).values() if new else ():
        future.result(timeout=60)


def produce_demo_events(bootstrap: str, topic: str, count: int, keys: int = 5, seed: int = 7) -> None:
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _ in range(count):
        key = f"sensor-{rng.randrange(keys)}"
        producer.produce(topic, key=key.encode(), value=json.dumps({"amount": rng.randint(1, 100)}).encode())
    producer.flush(60)


def aggregate(events, watermark: str = "1 minute", window: str = "1 minute"):
    """Count and sum of `amount` per key and per `window` of the record timestamp, late data bounded by
    `watermark`."""
    from pyspark.sql import functions as F

    parsed = events.select(
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key"),
        F.col("timestamp"),
        F.from_json(F.col("value").cast("string"), VALUE_SCHEMA).alias("v"),
    )
    return (
        parsed.withWatermark("timestamp", watermark)
        .groupBy(F.window("timestamp", window), F.col("key"))
        .agg(
            F.count(F.lit(1)).alias("count"), F.sum(F.coalesce(F.col("v.amount"), F.lit(0.0))).alias("amount")
        )
        .select(
            "key",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
            "amount",
        )
    )


def kafka_sink(bootstrap: str, topic: str, echo: Callable[[str], None] | None = None):
    """A foreachBatch function writing each aggregate row to `topic` and waiting for the acks before the batch
    counts as done (so a crash re-sends, never loses, a batch's output)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})

    def write(batch_df, batch_id: int) -> None:
        rows = batch_df.collect()
        for row in rows:
            start = row["window_start"].isoformat()
            doc = {
                "key": row["key"],
                "window_start": start,
                "window_end": row["window_end"].isoformat(),
                "count": int(row["count"]),
                "amount": float(row["amount"]),
            }
            producer.produce(topic, key=f"{row['key']}|{start}".encode(), value=json.dumps(doc).encode())
            if echo is not None:
                echo(f"batch {batch_id}: {doc}")
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} aggregate records not acknowledged by {bootstrap}")

    return write


def start_pipeline(
    spark,
    *,
    bootstrap: str,
    source: str = DEFAULTS["source"],
    sink: str = DEFAULTS["sink"],
    group: str = DEFAULTS["group"],
    query_name: str = DEFAULTS["query_name"],
    checkpoint: str | Path = DEFAULTS["checkpoint"],
    trigger: str = "2 seconds",
    watermark: str = "1 minute",
    echo: Callable[[str], None] | None = None,
):
    """Start the pipeline; returns the StreamingQuery."""
    events = (
        spark.readStream.format("kgc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("kafka.group.id", group)
        .option("queryName", query_name)
        .load()
    )
    return (
        aggregate(events, watermark=watermark)
        .writeStream.queryName(query_name)
        .outputMode("update")
        .foreachBatch(kafka_sink(bootstrap, sink, echo))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=trigger)
        .start()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--source", default=DEFAULTS["source"], help="input topic (created if missing)")
    parser.add_argument("--sink", default=DEFAULTS["sink"], help="output topic (created if missing)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of topics this creates")
    parser.add_argument("--group", default=DEFAULTS["group"], help="the consumer group the pipeline joins")
    parser.add_argument(
        "--query-name", default=DEFAULTS["query_name"], help="-> group.instance.id kgc-spark-NAME"
    )
    parser.add_argument("--checkpoint", default=DEFAULTS["checkpoint"])
    parser.add_argument("--trigger", default="2 seconds")
    parser.add_argument("--demo-events", type=int, default=0, help="produce this many sample events first")
    parser.add_argument(
        "--run-for", type=float, default=0.0, help="stop after this many seconds (0: run until ^C)"
    )
    args = parser.parse_args(argv)

    ensure_topics(args.bootstrap, {args.source: args.partitions, args.sink: args.partitions})
    if args.demo_events:
        produce_demo_events(args.bootstrap, args.source, args.demo_events)
        print(f"produced {args.demo_events} demo events to {args.source}", flush=True)
    spark = build_session()
    query = start_pipeline(
        spark,
        bootstrap=args.bootstrap,
        source=args.source,
        sink=args.sink,
        group=args.group,
        query_name=args.query_name,
        checkpoint=args.checkpoint,
        trigger=args.trigger,
        echo=lambda line: print(line, flush=True),
    )
    print(
        f"pipeline {args.query_name}: {args.source} -> {args.sink}, group {args.group}; ^C stops", flush=True
    )
    try:
        if args.run_for > 0:
            query.awaitTermination(args.run_for)
        else:
            query.awaitTermination()
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
