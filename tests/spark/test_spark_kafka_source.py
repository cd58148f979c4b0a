"""Spark's own Kafka source (spark-sql-kafka-0-10) as a member of this server's consumer group.

With spark.sql.streaming.kafka.useDeprecatedOffsetFetching=true, `subscribe` and `kafka.group.id`, the driver
of each query runs a Java KafkaConsumer that joins the group (JoinGroup/SyncGroup/Heartbeat, kafka-clients
3.9.0 for Spark 4.0.0) and plans each batch from its assignment; executors read with assign(). Two queries
with one group id therefore split the topic's partitions.

Accommodations (client behaviour, not server bugs), Spark 4.0.0 / kafka-clients 3.9.0:
- SPARK-53904: the driver polls 500 ms for its first assignment; the server runs with
  group.initial.rebalance.delay.ms=0 so the first join completes in time.
- A query whose assignment shrinks at the second member's join sees partitions "disappear" and would fail with
  failOnDataLoss=true; the test sets failOnDataLoss=false (the other query reads those partitions) and
  produces only once the split is in place, so the first query read nothing from the partitions it gave away.
"""

from __future__ import annotations

import uuid

import pytest
from spark_support import (
    Collector,
    create_topic,
    describe_group,
    member_assignments,
    produce,
    stop_all,
    wait_until,
)

pytestmark = pytest.mark.spark

PARTITIONS = 4
PER_PARTITION = 50


def _kafka_query(spark, bootstrap: str, topic: str, group: str, collector: Collector):
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.group.id", group)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .load()
    )
    return (
        df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.foreachBatch(collector)
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def test_two_spark_kafka_queries_share_one_group(spark, server):
    topic = f"spark-builtin-{uuid.uuid4().hex[:8]}"
    group = f"spark-builtin-group-{uuid.uuid4().hex[:8]}"
    create_topic(server.bootstrap, topic, PARTITIONS)
    a, b = Collector(), Collector()
    qa = qb = None
    try:
        qa = _kafka_query(spark, server.bootstrap, topic, group, a)
        qb = _kafka_query(spark, server.bootstrap, topic, group, b)

        # DescribeGroups shows both drivers as members, each with half of the partitions.
        def split():
            members = member_assignments(server.bootstrap, group)
            if len(members) != 2 or any(not parts for parts in members.values()):
                return None
            return members

        members = wait_until(split, "two Spark drivers in the group, each with partitions")
        owned = list(members.values())
        assert owned[0].isdisjoint(owned[1])
        assert owned[0] | owned[1] == {(topic, p) for p in range(PARTITIONS)}
        desc = describe_group(server.bootstrap, group)
        assert not desc.is_simple_consumer_group
        assert all(m.client_id.startswith("consumer-" + group) for m in desc.members), [
            m.client_id for m in desc.members
        ]

        sent = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "builtin")
        wait_until(
            lambda: len(a.snapshot()) + len(b.snapshot()) >= len(sent), "both queries to read every record"
        )

        rows_a, rows_b = a.snapshot(), b.snapshot()
        got = [(p, v) for p, _off, v in rows_a + rows_b]
        assert len(got) == len(sent) and set(got) == sent, "every record read exactly once by the two queries"
        parts_a = {p for p, _o, _v in rows_a}
        parts_b = {p for p, _o, _v in rows_b}
        assert parts_a and parts_b and parts_a.isdisjoint(parts_b), (parts_a, parts_b)
        # Each query read exactly the partitions the group assigned to its driver.
        assert sorted([{(topic, p) for p in parts_a}, {(topic, p) for p in parts_b}], key=sorted) == sorted(
            owned, key=sorted
        )
        for q in (qa, qb):
            assert q.isActive and q.exception() is None
    finally:
        stop_all(qa, qb)
