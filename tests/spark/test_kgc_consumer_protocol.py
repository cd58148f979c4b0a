"""format("kgc") with the consumer group protocol of KIP-848 (`kafka.group.protocol=consumer`), against a real
server: the driver's member reconciles incrementally (librdkafka refuses assign() there, as it does with the
classic protocol's cooperative-sticky assignor, tested here too), the group is a consumer group, a query
restarted under the same name gets its partitions back with no new group epoch, and a second live query of
that name is refused.
"""

from __future__ import annotations

import uuid

import pytest
from spark_support import (
    Collector,
    admin_get,
    committed_offsets,
    create_topic,
    describe_group,
    high_watermarks,
    member_assignments,
    produce,
    stop_all,
    wait_until,
)

from kgc_spark import FORMAT, instance_id_for

pytestmark = pytest.mark.spark

PER_PARTITION = 30
# Reconciliation steps take a heartbeat interval each; Kafka's minimums (5 s, 45 s) would make a test wait for
# tens of seconds, so the server gets the short intervals its configuration allows below them.
CONSUMER_GROUP_SETTINGS = {
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.session.timeout.ms": 6000,
    "group.consumer.session.timeout.ms": 6000,
}


@pytest.fixture
def server(server_factory):
    return server_factory(CONSUMER_GROUP_SETTINGS)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


CONSUMER_PROTOCOL = {"kafka.group.protocol": "consumer"}
# The classic protocol with librdkafka's cooperative assignor rebalances incrementally too (the same driver path).
COOPERATIVE = {"kafka.partition.assignment.strategy": "cooperative-sticky"}


def _query(
    spark, bootstrap, topic, group, query_name, collector, checkpoint=None, spark_name=None, **options
):
    options = {**CONSUMER_PROTOCOL, **options}
    reader = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.group.id", group)
        .option("queryName", query_name)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.queryName(spark_name or query_name)
        .foreachBatch(collector)
        .trigger(processingTime="500 milliseconds")
    )
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    return writer.start()


def _values(rows):
    return [(p, v) for p, _offset, v in rows]


def _all_committed(bootstrap, group, topic, partitions):
    ends = high_watermarks(bootstrap, topic, partitions)
    committed = committed_offsets(bootstrap, group)
    return committed if all(committed.get((topic, p)) == ends[p] for p in range(partitions)) else None


def _split(bootstrap, group, names):
    members = member_assignments(bootstrap, group)
    wanted = {instance_id_for(n) for n in names}
    return members if set(members) == wanted and all(members.values()) else None


@pytest.mark.parametrize(
    ("protocol", "group_type"),
    [(CONSUMER_PROTOCOL, "CONSUMER"), (COOPERATIVE, "CLASSIC")],
    ids=["consumer", "cooperative"],
)
def test_two_queries_rebalancing_incrementally_split_the_partitions_and_read_each_record_once(
    spark, server, protocol, group_type
):
    topic, group = _name("kgc-incr"), _name("kgc-incr-group")
    partitions = 4
    create_topic(server.bootstrap, topic, partitions)
    names = ("a-" + group, "b-" + group)
    a, b = Collector(), Collector()
    qa = qb = None
    try:
        options = {"kafka.group.protocol": "classic", **protocol}
        qa = _query(spark, server.bootstrap, topic, group, names[0], a, **options)
        wait_until(
            lambda: _split(server.bootstrap, group, names[:1]), "the first driver to hold the partitions"
        )
        # The second member's arrival moves partitions one way only: the first driver revokes some (an
        # incremental rebalance, which librdkafka would refuse to run through assign()), the second gets them.
        qb = _query(spark, server.bootstrap, topic, group, names[1], b, **options)
        members = wait_until(
            lambda: _split(server.bootstrap, group, names), "two drivers, each with partitions"
        )
        owned_a, owned_b = members[instance_id_for(names[0])], members[instance_id_for(names[1])]
        assert owned_a.isdisjoint(owned_b) and owned_a | owned_b == {(topic, p) for p in range(partitions)}
        assert len(owned_a) == len(owned_b) == partitions // 2
        desc = describe_group(server.bootstrap, group)
        assert str(desc.type).rsplit(".", 1)[-1] == group_type, desc.type

        sent = produce(server.bootstrap, topic, partitions, PER_PARTITION, "848")
        wait_until(
            lambda: len(a.snapshot()) + len(b.snapshot()) >= len(sent), "both queries to read everything"
        )
        committed = wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, partitions), "both queries' commits"
        )
        rows_a, rows_b = a.snapshot(), b.snapshot()
        got = _values(rows_a) + _values(rows_b)
        assert len(got) == len(sent) and set(got) == sent, "every record read exactly once by the two queries"
        assert {(topic, p) for p, _o, _v in rows_a} == owned_a
        assert {(topic, p) for p, _o, _v in rows_b} == owned_b
        assert committed == {(topic, p): PER_PARTITION for p in range(partitions)}
        assert qa.isActive and qb.isActive and qa.exception() is None and qb.exception() is None
    finally:
        stop_all(qa, qb)


def test_a_query_restarted_by_name_on_the_consumer_protocol_gets_its_partitions_back(spark, server, tmp_path):
    topic, group, name = _name("kgc-848-restart"), _name("kgc-848-restart-group"), _name("restart")
    partitions = 3
    create_topic(server.bootstrap, topic, partitions)
    checkpoint = tmp_path / "checkpoint"
    first, second = Collector(), Collector()
    query = None
    try:
        sent1 = produce(server.bootstrap, topic, partitions, PER_PARTITION, "before")
        query = _query(spark, server.bootstrap, topic, group, name, first, checkpoint)
        wait_until(lambda: len(first.snapshot()) >= len(sent1), "the first run to read its records")
        wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, partitions), "the first run's commits"
        )
        status, before = admin_get(server.admin_url, f"/v1/groups/{group}")
        assert status == 200 and before["type"] == "consumer" and before["state"] == "Stable", before
        [old_member] = before["members"]
        query.stop()
        query = None

        # Spark ends the planner process with SIGTERM; the driver's member leaves then as a static member
        # (epoch -2), so its partitions wait for it: the same name (the same group.instance.id) gets them back
        # at once, with no new group epoch, and reads on from the checkpoint.
        query = _query(spark, server.bootstrap, topic, group, name, second, checkpoint)
        sent2 = produce(server.bootstrap, topic, partitions, PER_PARTITION, "after")
        wait_until(lambda: len(second.snapshot()) >= len(sent2), "the restarted run to read the new records")
        wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, partitions), "the second run's commits"
        )
        members = member_assignments(server.bootstrap, group)
        assert members == {instance_id_for(name): {(topic, p) for p in range(partitions)}}
        status, after = admin_get(server.admin_url, f"/v1/groups/{group}")
        assert status == 200 and after["state"] == "Stable", after
        [new_member] = after["members"]
        assert after["group_epoch"] == before["group_epoch"], (
            before["last_rebalance"],
            after["last_rebalance"],
        )
        assert new_member["group_instance_id"] == old_member["group_instance_id"] == instance_id_for(name)
        assert new_member["member_id"] != old_member["member_id"]
        assert set(_values(second.snapshot())) == sent2 and len(second.snapshot()) == len(sent2)
        assert set(_values(first.snapshot())) == sent1
        assert query.isActive and query.exception() is None
    finally:
        stop_all(query)


def test_a_second_query_with_the_same_name_on_the_consumer_protocol_is_refused(spark, server):
    # KIP-848's rule for a duplicate static member is the opposite of KIP-345's: the member in place stays, the
    # newcomer is refused (UNRELEASED_INSTANCE_ID) until the old one leaves or its session expires. The new
    # query retries for assignmentTimeoutMs, then stops with that error; the first reads on.
    topic, group, name = _name("kgc-848-dup"), _name("kgc-848-dup-group"), _name("dup")
    partitions = 2
    create_topic(server.bootstrap, topic, partitions)
    old_rows, new_rows = Collector(), Collector()
    old = new = None
    try:
        sent1 = produce(server.bootstrap, topic, partitions, PER_PARTITION, "old")
        old = _query(spark, server.bootstrap, topic, group, name, old_rows)
        wait_until(lambda: len(old_rows.snapshot()) >= len(sent1), "the first query to read its records")

        new = _query(
            spark,
            server.bootstrap,
            topic,
            group,
            name,
            new_rows,
            spark_name=name + "-new",
            assignmentTimeoutMs=4000,
        )
        wait_until(lambda: not new.isActive, "the second query to give up")
        message = str(new.exception())
        assert "instance ID is still used by another member" in message, message[-3000:]

        sent2 = produce(server.bootstrap, topic, partitions, PER_PARTITION, "still-old")
        wait_until(lambda: len(old_rows.snapshot()) >= len(sent1 | sent2), "the first query to read on")
        assert set(_values(old_rows.snapshot())) == sent1 | sent2 and new_rows.snapshot() == []
        assert old.isActive and old.exception() is None
        assert member_assignments(server.bootstrap, group) == {
            instance_id_for(name): {(topic, p) for p in range(partitions)}
        }
    finally:
        stop_all(old, new)
