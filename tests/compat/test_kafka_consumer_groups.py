"""Kafka's own consumer-group tool (kafka-consumer-groups.sh, i.e. org.apache.kafka.tools.consumer.group.
ConsumerGroupCommand from kafka-tools 4.x) against the server: --list, --describe (offsets with correct lag,
--members, --state), --reset-offsets (refused while the group has members, then --to-earliest --execute on the
Empty group) and --delete (refused while non-empty, then done)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.java import fetch_jar_set, run_java_tool
from tests.support.members import (
    committed_offsets,
    consumed_all,
    create_topic,
    high_watermarks,
    produce_batch,
    wait_for,
    wait_split,
)

pytestmark = pytest.mark.e2e

TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PARTITIONS = 3


@pytest.fixture(scope="session")
def kafka_tools() -> Path:
    return fetch_jar_set("kafka-tools")


def cgc(kafka_tools: Path, server, *args: str, check: bool = True):
    return run_java_tool(
        kafka_tools, TOOL, "--bootstrap-server", server.bootstrap, *args, server=server, check=check
    )


def table(stdout: str, first_column: str = "GROUP") -> list[dict[str, str]]:
    """The rows of the tool's whitespace-aligned table(s) whose header starts with `first_column`."""
    rows, header = [], None
    for line in stdout.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] == first_column:
            header = cols
            continue
        if header is not None and len(cols) == len(header):
            rows.append(dict(zip(header, cols, strict=True)))
    return rows


def offsets_rows(stdout: str, topic: str) -> dict[int, dict[str, str]]:
    return {int(r["PARTITION"]): r for r in table(stdout) if r.get("TOPIC") == topic}


def test_kafka_consumer_groups_list_describe_reset_delete(members, server, tmp_path, kafka_tools):
    group, topic = "cgc-group", "cgc-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 30, 600, tmp_path, partitions=PARTITIONS)  # 10 per partition
    m = members.start("ck", "c0", server, group, topic, settings={"partition.assignment.strategy": "range"})
    wait_split(members, [m], PARTITIONS, [PARTITIONS], timeout=30, stable_for=0)
    wait_for(lambda: consumed_all([m], placed), 30, "the batch consumed", members.describe)
    wait_for(
        lambda: committed_offsets(server, group, topic, PARTITIONS) == high_watermarks(placed, PARTITIONS),
        15,
        "the member's commits",
        members.describe,
    )

    # --list
    out = cgc(kafka_tools, server, "--list").stdout
    assert group in out.split(), out

    # --describe while the member is active: no lag, the member's client id on every partition.
    out = cgc(kafka_tools, server, "--describe", "--group", group).stdout
    rows = offsets_rows(out, topic)
    assert sorted(rows) == list(range(PARTITIONS)), out
    for r in rows.values():
        assert (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == ("10", "10", "0"), out
        assert r["GROUP"] == group and r["CLIENT-ID"] == "ck-c0" and r["CONSUMER-ID"] != "-", out
    members_out = cgc(kafka_tools, server, "--describe", "--group", group, "--members").stdout
    mrows = [r for r in table(members_out) if r["GROUP"] == group]
    assert (
        len(mrows) == 1 and mrows[0]["CLIENT-ID"] == "ck-c0" and mrows[0]["#PARTITIONS"] == str(PARTITIONS)
    ), members_out
    state_out = cgc(kafka_tools, server, "--describe", "--group", group, "--state").stdout
    srows = [r for r in table(state_out) if r["GROUP"] == group]
    assert len(srows) == 1, state_out
    assert (
        srows[0]["STATE"] == "Stable"
        and srows[0]["ASSIGNMENT-STRATEGY"] == "range"
        and srows[0]["#MEMBERS"] == "1"
    ), state_out

    # Resetting or deleting a group with members is refused.
    busy = cgc(
        kafka_tools,
        server,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-earliest",
        "--execute",
        check=False,
    )
    assert "inactive" in (busy.stdout + busy.stderr) and "Stable" in (busy.stdout + busy.stderr), busy
    assert committed_offsets(server, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10)
    busy = cgc(kafka_tools, server, "--delete", "--group", group, check=False)
    assert "NON_EMPTY_GROUP" in (busy.stdout + busy.stderr) or "not empty" in (busy.stdout + busy.stderr), (
        busy
    )

    # The member leaves; more messages arrive: 2, 2, 1 more on partitions 0, 1, 2.
    assert m.close() == 0, members.describe([m])
    produce_batch(server, topic, 5, 601, tmp_path, partitions=PARTITIONS)
    out = cgc(kafka_tools, server, "--describe", "--group", group).stdout
    rows = offsets_rows(out, topic)
    lags = {
        p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"]) for p, r in rows.items()
    }
    assert lags == {0: ("10", "12", "2", "-"), 1: ("10", "12", "2", "-"), 2: ("10", "11", "1", "-")}, out
    state_out = cgc(kafka_tools, server, "--describe", "--group", group, "--state").stdout
    srows = [r for r in table(state_out) if r["GROUP"] == group]
    assert len(srows) == 1 and srows[0]["STATE"] == "Empty" and srows[0]["#MEMBERS"] == "0", state_out

    # --reset-offsets: a dry run changes nothing; --execute on the Empty group commits the earliest offsets.
    dry = cgc(
        kafka_tools,
        server,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-earliest",
        "--dry-run",
    ).stdout
    assert {p: r["NEW-OFFSET"] for p, r in offsets_rows(dry, topic).items()} == dict.fromkeys(
        range(3), "0"
    ), dry
    assert committed_offsets(server, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10)
    done = cgc(
        kafka_tools,
        server,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-earliest",
        "--execute",
    ).stdout
    assert {p: r["NEW-OFFSET"] for p, r in offsets_rows(done, topic).items()} == dict.fromkeys(
        range(3), "0"
    ), done
    assert committed_offsets(server, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 0)
    out = cgc(kafka_tools, server, "--describe", "--group", group).stdout
    lags = {
        p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in offsets_rows(out, topic).items()
    }
    assert lags == {0: ("0", "12", "12"), 1: ("0", "12", "12"), 2: ("0", "11", "11")}, out
    # --to-offset and --to-latest on single partitions
    cgc(
        kafka_tools,
        server,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:1",
        "--to-offset",
        "7",
        "--execute",
    )
    cgc(
        kafka_tools,
        server,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:2",
        "--to-latest",
        "--execute",
    )
    assert committed_offsets(server, group, topic, PARTITIONS) == {0: 0, 1: 7, 2: 11}

    # --delete on the Empty group; it is gone from --list and describing it says so.
    deleted = cgc(kafka_tools, server, "--delete", "--group", group)
    assert "successful" in deleted.stdout, deleted
    out = cgc(kafka_tools, server, "--list").stdout
    assert group not in out.split(), out
    gone = cgc(kafka_tools, server, "--describe", "--group", group, check=False)
    # Kafka 4.x brokers answer DescribeGroups v6 with GROUP_ID_NOT_FOUND (the tool prints
    # GroupIdNotFoundException); older ones with state Dead (the tool prints "Consumer group 'G' does not
    # exist.").
    said = gone.stdout + gone.stderr
    assert "GroupIdNotFoundException" in said or "does not exist" in said, gone
    # The group's committed offsets went with it (librdkafka reports "none" as OFFSET_INVALID, -1001).
    assert committed_offsets(server, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), -1001)


def test_kafka_consumer_groups_describes_a_consumer_protocol_group(members, server, tmp_path, kafka_tools):
    """A KIP-848 group (librdkafka with group.protocol=consumer): the tool lists it with its type and state, and
    --describe --members --verbose shows each member's epoch, assignment and target assignment, which the 4.x
    tool reads with ConsumerGroupDescribe."""
    group, topic = "cgc-848", "cgc-848-topic"
    create_topic(server, topic, PARTITIONS + 1)
    ms = [
        members.start("ck", f"k{i}", server, group, topic, settings={"group.protocol": "consumer"})
        for i in range(2)
    ]
    split = wait_split(members, ms, PARTITIONS + 1, [2, 2], timeout=40)

    out = cgc(kafka_tools, server, "--list", "--type").stdout
    rows = {r["GROUP"]: r for r in table(out)}
    assert rows[group]["TYPE"] == "Consumer", out

    out = cgc(kafka_tools, server, "--describe", "--group", group, "--state").stdout
    (state,) = [r for r in table(out) if r["GROUP"] == group]
    assert (state["STATE"], state["#MEMBERS"], state["ASSIGNMENT-STRATEGY"]) == ("Stable", "2", "uniform"), (
        out
    )

    out = cgc(kafka_tools, server, "--describe", "--group", group, "--members", "--verbose").stdout
    described = [r for r in table(out) if r["GROUP"] == group]
    assert len(described) == 2, out
    assert {r["CLIENT-ID"] for r in described} == {f"ck-k{i}" for i in range(2)}, out
    assert all(r["CURRENT-EPOCH"] == r["TARGET-EPOCH"] for r in described), out
    for m in ms:
        (row,) = [r for r in described if r["CLIENT-ID"] == f"ck-{m.name}"]
        held = f"{topic}:{','.join(map(str, sorted(split[m.name])))}"
        assert (row["CURRENT-ASSIGNMENT"], row["TARGET-ASSIGNMENT"], row["#PARTITIONS"]) == (
            held,
            held,
            "2",
        ), out
    for m in ms:
        assert m.close() == 0, members.describe([m])
