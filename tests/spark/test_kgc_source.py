"""This project's PySpark streaming source, format("kgc") (kgc_spark), against a real server.

The query's driver holds a real group membership through confluent-kafka, plans each micro-batch from its
assignment, the executors read with assign()-mode consumers, and each completed batch's end offsets are
committed to the group. Checked from outside with stock tools: DescribeGroups and OffsetFetch through
confluent-kafka's AdminClient, ListOffsets for the log ends, and the server's admin HTTP API for the group's
generation. The driver's member runs eager rebalances (the classic protocol's default assignors) or incremental
ones (`kafka.group.protocol=consumer`, KIP-848; or the classic protocol with cooperative-sticky), where
librdkafka refuses assign().
"""

from __future__ import annotations

import time
import uuid

import pytest
from spark_support import (
    Collector,
    admin_get,
    admin_post,
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

PARTITIONS = 3
PER_PARTITION = 40
# The driver's group protocol (kgc options) and the group type DescribeGroups then shows.
PROTOCOLS = {
    "eager": ({}, "CLASSIC"),
    "cooperative": ({"kafka.partition.assignment.strategy": "cooperative-sticky"}, "CLASSIC"),
    "consumer": ({"kafka.group.protocol": "consumer"}, "CONSUMER"),
}
# A consumer group's reconciliation steps take a heartbeat interval each: below Kafka's minimums (5 s, 45 s),
# which the server's configuration allows, so a test does not wait for tens of seconds.
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


def _kgc_query(
    spark, bootstrap, topic, group, query_name, collector, checkpoint=None, spark_name=None, **options
):
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


def _all_committed(bootstrap, group, topic, partitions):
    ends = high_watermarks(bootstrap, topic, partitions)
    committed = committed_offsets(bootstrap, group)
    return committed if all(committed.get((topic, p)) == ends[p] for p in range(partitions)) else None


def _values(rows):
    return [(p, v) for p, _offset, v in rows]


def test_one_query_reads_everything_and_commits_the_log_end(spark, server):
    topic, group, name = _name("kgc-one"), _name("kgc-one-group"), _name("one")
    create_topic(server.bootstrap, topic, PARTITIONS)
    sent = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "first")
    rows = Collector()
    query = None
    try:
        query = _kgc_query(spark, server.bootstrap, topic, group, name, rows)
        wait_until(lambda: len(rows.snapshot()) >= len(sent), "the first wave")
        # The driver is a static member of the group named after the query, holding every partition.
        members = wait_until(lambda: member_assignments(server.bootstrap, group), "a Stable group")
        assert members == {instance_id_for(name): {(topic, p) for p in range(PARTITIONS)}}

        sent |= produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "second")
        wait_until(lambda: len(rows.snapshot()) >= len(sent), "the second wave")
        committed = wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, PARTITIONS),
            "the group's committed offsets to reach the log end",
        )
        got = rows.snapshot()
        assert len(got) == len(sent) and set(_values(got)) == sent, "every record exactly once"
        assert sorted((p, o) for p, o, _v in got) == sorted(
            (p, o) for p in range(PARTITIONS) for o in range(2 * PER_PARTITION)
        )
        assert committed == {(topic, p): 2 * PER_PARTITION for p in range(PARTITIONS)}
        assert query.isActive and query.exception() is None
        # The server's own view: zero lag for the group.
        status, doc = admin_get(server.admin_url, f"/v1/groups/{group}")
        assert status == 200 and doc["lag"] == 0, doc
    finally:
        stop_all(query)


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_two_queries_split_the_partitions_and_read_each_record_once(spark, server, protocol):
    options, group_type = PROTOCOLS[protocol]
    topic, group = _name("kgc-two"), _name("kgc-two-group")
    partitions = 4
    create_topic(server.bootstrap, topic, partitions)
    names = ("two-a-" + group, "two-b-" + group)
    a, b = Collector(), Collector()
    qa = qb = None

    def held_by(*queries):
        members = member_assignments(server.bootstrap, group)
        wanted = {instance_id_for(n) for n in queries}
        return members if set(members) == wanted and all(members.values()) else None

    try:
        qa = _kgc_query(spark, server.bootstrap, topic, group, names[0], a, **options)
        wait_until(lambda: held_by(names[0]), "the first driver to hold the partitions")
        # The second driver's arrival: an eager rebalance takes every partition from the first and deals them
        # again; an incremental one has the first give up only those that move.
        qb = _kgc_query(spark, server.bootstrap, topic, group, names[1], b, **options)
        members = wait_until(lambda: held_by(*names), "two kgc drivers in the group, each with partitions")
        owned_a, owned_b = members[instance_id_for(names[0])], members[instance_id_for(names[1])]
        assert owned_a.isdisjoint(owned_b) and owned_a | owned_b == {(topic, p) for p in range(partitions)}
        assert len(owned_a) == len(owned_b) == partitions // 2
        desc = describe_group(server.bootstrap, group)
        assert str(desc.type).rsplit(".", 1)[-1] == group_type, desc.type

        sent = produce(server.bootstrap, topic, partitions, PER_PARTITION, "split")
        wait_until(
            lambda: len(a.snapshot()) + len(b.snapshot()) >= len(sent), "both queries to read every record"
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


@pytest.mark.parametrize("protocol", ["eager", "consumer"])
def test_restarting_a_query_by_name_keeps_its_place_without_a_rebalance(spark, server, tmp_path, protocol):
    options, group_type = PROTOCOLS[protocol]
    topic, group, name = _name("kgc-restart"), _name("kgc-restart-group"), _name("restart")
    create_topic(server.bootstrap, topic, PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    first, second = Collector(), Collector()
    query = None
    try:
        sent1 = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "before")
        query = _kgc_query(spark, server.bootstrap, topic, group, name, first, checkpoint, **options)
        wait_until(lambda: len(first.snapshot()) >= len(sent1), "the first run to read its records")
        wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, PARTITIONS), "the first run's commits"
        )
        status, before = admin_get(server.admin_url, f"/v1/groups/{group}")
        assert status == 200 and before["state"] == "Stable", before
        assert before["type"] == group_type.lower(), before["type"]
        [old_member] = before["members"]
        query.stop()
        query = None

        # The same name: the same group.instance.id. Spark ends the planner process with SIGTERM, on which the
        # driver closes its member. A classic static member sends no LeaveGroup then, and the new driver takes
        # its place (KIP-345); a consumer-protocol one leaves with epoch -2, which keeps its partitions for the
        # new driver. Either way: no rebalance.
        query = _kgc_query(spark, server.bootstrap, topic, group, name, second, checkpoint, **options)
        sent2 = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "after")
        wait_until(lambda: len(second.snapshot()) >= len(sent2), "the restarted run to read the new records")
        wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, PARTITIONS), "the second run's commits"
        )
        status, after = admin_get(server.admin_url, f"/v1/groups/{group}")
        assert status == 200 and after["state"] == "Stable", after
        [new_member] = after["members"]
        if after["generation"] != before["generation"]:  # what the group went through, and the server's log
            _status, timeline = admin_get(server.admin_url, f"/v1/groups/{group}/timeline")
            pytest.fail(
                f"the restart rebalanced the group: {before['last_rebalance']} -> {after['last_rebalance']}\n"
                f"timeline: {timeline}\n{server.output()}"
            )
        assert new_member["group_instance_id"] == old_member["group_instance_id"] == instance_id_for(name)
        assert new_member["member_id"] != old_member["member_id"]
        # The checkpoint carried the position: the second run read only what came after.
        assert set(_values(second.snapshot())) == sent2
        assert set(_values(first.snapshot())) == sent1
    finally:
        stop_all(query)


def test_pausing_the_group_stops_the_reading(spark, server):
    topic, group, name = _name("kgc-pause"), _name("kgc-pause-group"), _name("pause")
    create_topic(server.bootstrap, topic, PARTITIONS)
    rows = Collector()
    query = None
    try:
        sent1 = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "running")
        query = _kgc_query(spark, server.bootstrap, topic, group, name, rows)
        wait_until(lambda: len(rows.snapshot()) >= len(sent1), "the records before the pause")

        status, _doc = admin_post(server.admin_url, f"/v1/groups/{group}/pause", {"topics": [topic]})
        if status == 404:
            pytest.skip("the server has no POST /v1/groups/{group}/pause yet")
        assert status == 200, status
        # Paused partitions are withheld from the assignment: the driver plans nothing for them.
        wait_until(
            lambda: member_assignments(server.bootstrap, group) == {instance_id_for(name): set()},
            "the paused topic to leave the member's assignment",
        )
        sent2 = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "paused")
        ends = high_watermarks(server.bootstrap, topic, PARTITIONS)
        assert ends == {p: 2 * PER_PARTITION for p in range(PARTITIONS)}
        # Let the query run for a number of triggers (500 ms each): nothing of the second wave may arrive.
        time.sleep(8)
        assert query.isActive and query.exception() is None
        assert set(_values(rows.snapshot())) == sent1
        committed = committed_offsets(server.bootstrap, group)
        assert all(committed.get((topic, p), 0) <= PER_PARTITION for p in range(PARTITIONS)), committed

        status, _doc = admin_post(server.admin_url, f"/v1/groups/{group}/resume", {"topics": [topic]})
        assert status == 200, status
        wait_until(
            lambda: len(rows.snapshot()) >= len(sent1 | sent2), "the records produced during the pause"
        )
        assert set(_values(rows.snapshot())) == sent1 | sent2
        assert len(rows.snapshot()) == len(sent1 | sent2)
    finally:
        stop_all(query)


def test_a_second_query_with_the_same_name_fences_the_first(spark, server):
    # KIP-345: one group.instance.id, one live member. The newer driver takes the place; the older one's
    # consumer gets FENCED_INSTANCE_ID (fatal in librdkafka) and its query stops with that error instead of
    # reading on.
    topic, group, name = _name("kgc-fence"), _name("kgc-fence-group"), _name("fence")
    create_topic(server.bootstrap, topic, PARTITIONS)
    old_rows, new_rows = Collector(), Collector()
    old = new = None
    try:
        sent1 = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "old")
        old = _kgc_query(spark, server.bootstrap, topic, group, name, old_rows)
        wait_until(lambda: len(old_rows.snapshot()) >= len(sent1), "the first query to read its records")
        wait_until(
            lambda: _all_committed(server.bootstrap, group, topic, PARTITIONS), "the first query's commits"
        )
        status, before = admin_get(server.admin_url, f"/v1/groups/{group}")
        [old_member] = before["members"]

        # (Spark refuses two active queries of one name in a session: the same source queryName, another
        # Spark query name, as two Spark applications would run it.)
        new = _kgc_query(spark, server.bootstrap, topic, group, name, new_rows, spark_name=name + "-new")
        wait_until(lambda: not old.isActive, "the fenced query to stop")
        error = old.exception()
        message = str(error)
        assert "latestOffset" in message and "fenced by other consumer" in message, message[-3000:]

        sent2 = produce(server.bootstrap, topic, PARTITIONS, PER_PARTITION, "new")
        # The new query starts from the group's committed offsets: only the new records, each once.
        wait_until(lambda: len(new_rows.snapshot()) >= len(sent2), "the new query to read the new records")
        assert set(_values(new_rows.snapshot())) == sent2 and len(new_rows.snapshot()) == len(sent2)
        status, after = admin_get(server.admin_url, f"/v1/groups/{group}")
        [new_member] = after["members"]
        assert new_member["group_instance_id"] == instance_id_for(name)
        assert new_member["member_id"] != old_member["member_id"]
        assert new.isActive and new.exception() is None
    finally:
        stop_all(old, new)


def test_a_second_query_with_the_same_name_on_the_consumer_protocol_is_refused(spark, server):
    # KIP-848's rule for a duplicate static member is the opposite of KIP-345's (the test above): the member in
    # place stays, the newcomer is refused (UNRELEASED_INSTANCE_ID) until the old one leaves or its session
    # expires. The new query retries for assignmentTimeoutMs, then stops with that error; the first reads on.
    options, _group_type = PROTOCOLS["consumer"]
    topic, group, name = _name("kgc-dup"), _name("kgc-dup-group"), _name("dup")
    partitions = 2
    create_topic(server.bootstrap, topic, partitions)
    old_rows, new_rows = Collector(), Collector()
    old = new = None
    try:
        sent1 = produce(server.bootstrap, topic, partitions, PER_PARTITION, "old")
        old = _kgc_query(spark, server.bootstrap, topic, group, name, old_rows, **options)
        wait_until(lambda: len(old_rows.snapshot()) >= len(sent1), "the first query to read its records")

        new = _kgc_query(
            spark,
            server.bootstrap,
            topic,
            group,
            name,
            new_rows,
            spark_name=name + "-new",
            assignmentTimeoutMs=4000,
            **options,
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


@pytest.mark.parametrize("protocol", ["eager", "consumer"])
def test_a_failing_rebalance_callback_fails_the_driver_at_once(server, protocol):
    # Whatever a rebalance callback raises comes out of poll() on the member's thread: it becomes the member's
    # fatal error, so the query stops with the reason, instead of the thread dying and the query waiting for an
    # assignment until assignmentTimeoutMs (how assign() in an incremental rebalance used to end). The fault is
    # injected in the member's own callback; the consumer and the server are real.
    from confluent_kafka import KafkaException

    from kgc_spark.member import GroupMember

    class Failing(GroupMember):
        def _on_assign(self, consumer, partitions):
            raise RuntimeError("injected")

    topic = _name("kgc-failing")
    create_topic(server.bootstrap, topic, 2)
    options, _group_type = PROTOCOLS[protocol]
    config = {k.removeprefix("kafka."): v for k, v in options.items()}
    member = Failing(
        {"bootstrap.servers": server.bootstrap, "group.id": _name("kgc-failing"), **config}, [topic]
    )
    try:
        started = time.monotonic()
        assert member.wait_for_assignment(30) == frozenset()
        assert time.monotonic() - started < 20
        assert "injected" in str(member.fatal_error)
        with pytest.raises(KafkaException, match="injected"):
            member.committed([(topic, 0)], 5)
    finally:
        member.close()
