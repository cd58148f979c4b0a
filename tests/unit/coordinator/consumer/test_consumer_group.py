"""Consumer groups beside the rest of the shard: offsets (member epochs), describe and list, deletion and
retention, classic groups of the same id, loading from the log, failed appends."""

from __future__ import annotations

import dataclasses
import datetime

from kio.index import load_request_schema
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest

from coordinator.consumer import records as rec
from coordinator.consumer.group import MemberState
from coordinator.consumer.manager import rebalance_key, registration_key, session_key
from coordinator.records import (
    CoordinatorRecord,
    GroupOfflineKey,
    GroupOfflineValue,
    RecordDecodeError,
    decode_record,
    new_group_offline_record,
)
from protocol.build import build
from protocol.errors import ErrorCode
from tests.unit.coordinator.group.context import GroupTestContext

from .context import ConsumerContext, FakeTopics, assignment_of, heartbeat_request, ok, parts, tid

FOO = tid("foo")


def commit(
    ctx: ConsumerContext,
    member_id: str,
    epoch: int,
    version: int = 9,
    group_id: str = "grp",
    partition: int = 0,
):
    request = build(
        load_request_schema(8, version),
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": epoch,
            "member_id": member_id,
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [
                {"name": "foo", "partitions": [{"partition_index": partition, "committed_offset": 42}]}
            ],
        },
    )
    result = ctx.apply(ctx.shard.offset_commit("c", version, request))
    ctx.answers.pop("c")
    (answer,) = [a for t, a in result.responses]
    return answer.topics[0].partitions[0].error_code


def fetch(ctx: ConsumerContext, member_id: str | None, epoch: int, group_id: str = "grp"):
    request = build(
        load_request_schema(9, 9),
        {
            "groups": [
                {
                    "group_id": group_id,
                    "member_id": member_id,
                    "member_epoch": epoch,
                    "topics": [{"name": "foo", "partition_indexes": [0]}],
                }
            ],
            "require_stable": False,
        },
    )
    result = ctx.shard.offset_fetch("f", 9, request)
    (answer,) = [a for t, a in result.responses]
    return answer.groups[0]


def test_offset_commit_with_member_epochs():
    # ConsumerGroupTest.testValidateOffsetCommit
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    assert commit(ctx, "m1", 1) == ErrorCode.none
    assert commit(ctx, "m1", 0) == ErrorCode.stale_member_epoch  # (0: the join, before any partition)
    assert commit(ctx, "m1", 2) == ErrorCode.stale_member_epoch
    assert commit(ctx, "nobody", 1) == ErrorCode.unknown_member_id
    assert commit(ctx, "", -1) == ErrorCode.unknown_member_id  # an admin commit to a group with members
    assert commit(ctx, "m1", 1, version=8) == ErrorCode.unsupported_version
    ok(ctx.heartbeat("m1", -1))
    assert commit(ctx, "", -1) == ErrorCode.none  # the group is empty
    assert commit(ctx, "m1", 1, group_id="unknown") == ErrorCode.group_id_not_found
    assert commit(ctx, "m1", 1, version=8, group_id="unknown") == ErrorCode.illegal_generation


def test_offset_commit_at_an_older_epoch_of_partitions_held_then():
    # KIP-1251 (Kafka 4.3): partitionAssignmentEpoch <= clientEpoch <= memberEpoch
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))  # epoch 1: foo 0-5
    ok(ctx.heartbeat("m2"))  # epoch 2: m1 gives up 3-5
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    answer = ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(3))))
    assert answer.member_epoch == 2
    assert commit(ctx, "m1", 1, partition=0) == ErrorCode.none  # held since epoch 1
    assert commit(ctx, "m1", 1, partition=4) == ErrorCode.stale_member_epoch  # not its partition any more
    assert commit(ctx, "m1", 3, partition=0) == ErrorCode.stale_member_epoch  # ahead of the member
    ok(ctx.heartbeat("m2", -1))  # epoch 3: m1 gets 3-5 back at epoch 3
    answer = ok(ctx.heartbeat("m1", 2, owned=parts(foo=range(3))))
    assert answer.member_epoch == 3
    assert commit(ctx, "m1", 2, partition=1) == ErrorCode.none
    assert commit(ctx, "m1", 2, partition=4) == ErrorCode.stale_member_epoch  # given at epoch 3
    assert commit(ctx, "m1", 1, partition=1) == ErrorCode.none
    assert commit(ctx, "m1", 3, partition=4) == ErrorCode.none


def test_offset_fetch_with_member_epochs():
    # ConsumerGroupTest.testValidateOffsetFetch
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    assert commit(ctx, "m1", 1) == ErrorCode.none
    answer = fetch(ctx, "m1", 1)
    assert answer.error_code == ErrorCode.none and answer.topics[0].partitions[0].committed_offset == 42
    assert fetch(ctx, None, -1).topics[0].partitions[0].committed_offset == 42  # an admin's fetch
    assert fetch(ctx, "m1", 7).error_code == ErrorCode.stale_member_epoch
    assert fetch(ctx, "nobody", 1).error_code == ErrorCode.unknown_member_id


def test_consumer_group_describe():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1", rack_id="r1"))
    ok(ctx.heartbeat("m2", assignor="uniform"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6)), instance_id="i1"))  # revoking 3-5
    request = ConsumerGroupDescribeRequest(
        group_ids=("grp", "missing", ""), include_authorized_operations=False
    )
    result = ctx.shard.consumer_group_describe("d", 1, request)
    (answer,) = [a for _, a in result.responses]
    grp, missing, empty = answer.groups
    assert (grp.error_code, grp.group_state, grp.group_epoch, grp.assignment_epoch) == (
        0,
        "Reconciling",
        2,
        2,
    )
    assert grp.assignor_name == "uniform"
    m1, m2 = grp.members
    assert (m1.member_id, m1.instance_id, m1.rack_id, m1.member_epoch, m1.member_type) == (
        "m1",
        "i1",
        "r1",
        1,
        1,
    )
    assert m1.subscribed_topic_names == ("foo",) and m1.client_host == "/127.0.0.1"
    # partitions being revoked are still shown as the member's (KAFKA-20431)
    assert [(tp.topic_name, tp.partitions) for tp in m1.assignment.topic_partitions] == [
        ("foo", (0, 1, 2, 3, 4, 5))
    ]
    assert [(tp.topic_name, tp.partitions) for tp in m1.target_assignment.topic_partitions] == [
        ("foo", (0, 1, 2))
    ]
    assert m2.assignment.topic_partitions == ()
    assert (missing.error_code, empty.error_code) == (
        ErrorCode.group_id_not_found,
        ErrorCode.invalid_group_id,
    )


def test_describe_groups_and_list_groups_see_the_type():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    result = ctx.shard.describe_groups(
        "d", 5, DescribeGroupsRequest(groups=("grp",), include_authorized_operations=False)
    )
    (answer,) = [a for _, a in result.responses]
    assert answer.groups[0].group_state == "Dead"
    listed = ctx.shard.list_groups("l", 5, ListGroupsRequest(states_filter=(), types_filter=()))
    (answer,) = [a for _, a in listed.responses]
    assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in answer.groups] == [
        ("grp", "consumer", "Stable", "consumer")
    ]
    only_classic = ctx.shard.list_groups(
        "l", 5, ListGroupsRequest(states_filter=(), types_filter=("classic",))
    )
    assert [a for _, a in only_classic.responses][0].groups == ()
    stable = ctx.shard.list_groups(
        "l", 5, ListGroupsRequest(states_filter=("stable",), types_filter=("Consumer",))
    )
    assert len([a for _, a in stable.responses][0].groups) == 1


def test_delete_groups():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    assert commit(ctx, "m1", 1) == ErrorCode.none
    result = ctx.apply(ctx.shard.delete_groups("x", 2, DeleteGroupsRequest(groups_names=("grp",))))
    assert ctx.answers.pop("x").results[0].error_code == ErrorCode.non_empty_group
    ok(ctx.heartbeat("m1", -1))
    result = ctx.apply(ctx.shard.delete_groups("x", 2, DeleteGroupsRequest(groups_names=("grp",))))
    assert ctx.answers.pop("x").results[0].error_code == ErrorCode.none
    kinds = [rec.record_type(r.key) for r in result.records]
    assert kinds[0] == 1 and kinds[-1] == rec.GROUP_METADATA and all(r.value is None for r in result.records)
    assert "grp" not in ctx.consumer.groups
    assert fetch(ctx, None, -1).topics[0].partitions[0].committed_offset == -1


def test_offsets_retention_deletes_an_empty_consumer_group():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    assert commit(ctx, "m1", 1) == ErrorCode.none
    ok(ctx.heartbeat("m1", -1))
    ctx.clock.advance(8 * 24 * 3600 * 1000)
    ctx.apply(ctx.shard.expire_offsets())
    assert "grp" not in ctx.consumer.groups


def test_classic_groups_of_the_same_id():
    classic = GroupTestContext()
    classic.join_as_dynamic_member_and_complete_rebalance(group_id="busy")
    shard = classic.shard
    shard.consumer.topics = FakeTopics(foo=2)
    ctx = ConsumerContext()
    ctx.shard = shard
    ctx.clock, ctx.timer = classic.clock, classic.timer
    # a heartbeat past the join to a classic group (joining one with members upgrades it: test_migration)
    answer, _ = ctx.heartbeat("m1", 3, group_id="busy")
    assert answer.error_code == ErrorCode.group_id_not_found
    answer, _ = ctx.heartbeat("m1", -1, group_id="busy")
    assert answer.error_code == ErrorCode.group_id_not_found
    assert "busy" in shard.groups and "busy" not in shard.consumer.groups


def test_empty_classic_group_replaced_and_empty_consumer_group_downgraded():
    ctx = ConsumerContext()
    ctx.shard.classic.create_group("grp")
    answer, result = ctx.heartbeat("m1")
    ok(answer)
    assert result.records[0] == CoordinatorRecord(
        result.records[0].key, None
    )  # the classic group's tombstone
    assert "grp" not in ctx.shard.groups
    join = JoinGroupRequest(
        group_id="grp",
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        reason=None,
    )
    ctx.apply(ctx.shard.join_group("j", 9, dataclasses.replace(join, protocol_type="connect")))
    assert ctx.answers.pop("j").error_code == ErrorCode.inconsistent_group_protocol
    ok(ctx.heartbeat("m1", -1))
    result = ctx.apply(ctx.shard.join_group("j", 9, join))
    assert ctx.answers.pop("j").error_code == ErrorCode.member_id_required
    assert "grp" not in ctx.consumer.groups and "grp" in ctx.shard.groups


def test_load_rebuilds_the_groups_and_their_timers():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1"))
    ok(ctx.heartbeat("m2", regex="fo+", topics=None))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6)), instance_id="i1"))
    loaded = ctx.reload()
    group, original = loaded.consumer.groups["grp"], ctx.group()
    assert (group.group_epoch, group.assignment_epoch, group.metadata_hash) == (
        original.group_epoch,
        original.assignment_epoch,
        original.metadata_hash,
    )
    assert group.members == original.members
    assert group.target == original.target
    assert group.owners == original.owners and group.static_members == {"i1": "m1"}
    assert group.members["m1"].state == MemberState.UNREVOKED_PARTITIONS
    timer = loaded.consumer.timer
    assert timer.is_scheduled(session_key("grp", "m1")) and timer.is_scheduled(session_key("grp", "m2"))
    assert timer.is_scheduled(rebalance_key("grp", "m1")) and not timer.is_scheduled(
        rebalance_key("grp", "m2")
    )
    # offsets replayed before the group's records do not leave a classic group of the same id behind
    assert "grp" not in loaded.groups


def test_a_failed_append_undoes_the_heartbeat():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    before = dataclasses.replace(ctx.group().members["m1"])
    request = ConsumerGroupHeartbeatRequest(
        group_id="grp",
        member_id="m2",
        member_epoch=0,
        rebalance_timeout=datetime.timedelta(seconds=5),
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    result = ctx.shard.consumer_group_heartbeat("t", 1, request)
    assert result.records and result.on_append_failure is not None
    failed = result.on_append_failure(ErrorCode.not_coordinator)
    (answer,) = [a for _, a in failed.responses]
    assert answer.error_code == ErrorCode.not_coordinator
    assert set(ctx.group().members) == {"m1"} and ctx.group().members["m1"] == before
    assert ctx.group().group_epoch == 1
    answer, _ = ctx.heartbeat("m2")
    assert answer.member_epoch == 2 and assignment_of(answer) == {}


def test_records_round_trip_and_refuse_malformed_input():
    key = rec.ConsumerRecordKey(rec.CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    value = rec.CurrentMemberAssignmentValue(3, 2, 1, parts(foo=[0, 2]), parts(foo=[1]))
    record = rec.record(key, value)
    assert rec.decode_key(record.key) == key
    assert rec.decode_value(key, record.value) == value
    meta = rec.ConsumerRecordKey(rec.GROUP_METADATA, "g")
    for v in (rec.GroupMetadataValue(4), rec.GroupMetadataValue(4, -123456789)):
        assert rec.decode_value(meta, rec.encode_value(v)) == v
    member_key = rec.ConsumerRecordKey(rec.MEMBER_METADATA, "g", "m")
    member = rec.MemberMetadataValue("i", None, "c", "/h", ("a", "b"), "x.*", 300000, "range")
    assert rec.decode_value(member_key, rec.encode_value(member)) == member
    for bad in (record.value[:-1], record.value + b"\x00", b"\x00\x01" + record.value[2:]):
        try:
            rec.decode_value(key, bad)
        except RecordDecodeError:
            continue
        raise AssertionError(f"decoded {bad!r}")


def test_pause_withholds_partitions_from_the_target_until_resumed():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", topics=["foo", "bar"]))
    assert ctx.shard.pause_progress("grp")["in_effect"] is True
    result = ctx.apply(ctx.shard.pause_group("p", "grp", ["bar"]))
    assert ctx.answers.pop("p").error == ErrorCode.none
    assert [rec.record_type(r.key) for r in result.records][-1] == rec.GROUP_METADATA  # a new group epoch
    progress = ctx.shard.pause_progress("grp")
    assert progress["in_effect"] is False and progress["pending_members"] == ["m1"]
    everything = {**parts(foo=range(6)), **parts(bar=range(3))}
    answer, _ = ctx.heartbeat("m1", 1, owned=everything)
    assert answer.member_epoch == 1 and assignment_of(answer) == parts(foo=range(6))  # bar to be revoked
    answer, _ = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))
    assert answer.member_epoch == 2 and ctx.shard.pause_progress("grp")["in_effect"] is True
    ctx.apply(ctx.shard.resume_group("r", "grp"))
    ctx.answers.pop("r")
    answer, _ = ctx.heartbeat("m1", 2, owned=parts(foo=range(6)))
    assert answer.member_epoch == 3 and assignment_of(answer) == everything


def test_epoch_bumps_are_the_rebalances_observers_see():
    from coordinator.observability.history import GroupHistory

    ctx = ConsumerContext()
    history = GroupHistory()
    ctx.shard.add_listener(history)
    ok(ctx.heartbeat("m1"))
    ok(ctx.heartbeat("m2"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2])))
    ok(ctx.heartbeat("m2", 2, owned={}))  # Stable: the rebalance that m2's join started is complete
    ok(ctx.heartbeat("m2", -1))
    ctx.advance(45_000)  # m1's session
    assert history.rebalances("grp") == {"new_member": 2, "leave": 1, "session_expiry": 1}
    assert history.expirations("grp") == {"session_timeout": 1}
    assert history.completed_rebalances == 2
    timeline = history.timeline("grp")
    assert [r.reason.value for r in timeline] == ["new_member", "new_member", "leave", "session_expiry"]


def test_a_member_out_is_listed_once_however_many_epochs_follow_before_the_group_is_stable():
    """Each epoch bump is a rebalance to observers, and a consumer group's join phase ends only when it is
    stable: a member removed is listed as out by the rebalance it left during and the one its removal started,
    not again by every later one (which made each log line longer by every earlier removal)."""
    from coordinator.group.events import RemovalCause
    from coordinator.observability.history import GroupHistory

    ctx = ConsumerContext()
    history = GroupHistory()
    ctx.shard.add_listener(history)
    ok(ctx.heartbeat("m1"))
    ok(ctx.heartbeat("m2"))
    ok(ctx.heartbeat("m3"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1])))
    ok(ctx.heartbeat("m2", 2, owned={}))
    ok(ctx.heartbeat("m3", 3, owned={}))
    ok(ctx.heartbeat("m2", 3, owned={}))
    assert ctx.group().state.value == "Stable", ctx.group().state
    for member in ("m2", "m3"):
        ok(ctx.heartbeat(member, -1))
    second_leave = history.timeline("grp")[-1]
    assert [(m.member_id, c) for m, c in second_leave.members_out] == [("m3", RemovalCause.LEFT)]
    first_leave = history.timeline("grp")[-2]
    assert first_leave.outcome == "superseded"
    assert [m.member_id for m, _ in first_leave.members_out] == ["m2", "m3"]


def hb_request(member_id: str, epoch: int, owned, topics=None) -> ConsumerGroupHeartbeatRequest:
    from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions

    return ConsumerGroupHeartbeatRequest(
        group_id="grp",
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=5 if epoch == 0 else -0.001),
        subscribed_topic_names=topics,
        topic_partitions=None
        if owned is None
        else tuple(TopicPartitions(topic_id=t, partitions=tuple(sorted(ps))) for t, ps in owned.items()),
    )


def test_writes_in_flight_are_undone_together_to_the_oldest_base():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    stable = dataclasses.replace(ctx.group().members["m1"])
    # m2 joins and m1 heartbeats on top of it, both writes still in flight (not yet durable)
    first = ctx.shard.consumer_group_heartbeat("a", 1, hb_request("m2", 0, {}, ("foo",)))
    second = ctx.shard.consumer_group_heartbeat("b", 1, hb_request("m1", 1, parts(foo=range(6))))
    assert (
        first.records and second.records and ctx.group().inflight == len(first.records) + len(second.records)
    )
    assert ctx.group().members["m1"].state == MemberState.UNREVOKED_PARTITIONS
    # the first append fails: both are undone, back to before m2's join
    failed = first.on_append_failure(ErrorCode.coordinator_not_available)
    assert [a.error_code for _, a in failed.responses] == [ErrorCode.coordinator_not_available]
    assert set(ctx.group().members) == {"m1"} and ctx.group().members["m1"] == stable
    assert ctx.group().group_epoch == 1 and ctx.group().inflight == 0
    second.on_append_failure(ErrorCode.coordinator_not_available)
    assert set(ctx.group().members) == {"m1"}
    # a write that succeeds settles: nothing left in flight
    ok(ctx.heartbeat("m2"))
    assert ctx.group().inflight == 0 and ctx.group().base is None


def test_a_lost_answer_is_made_good_by_the_next_heartbeat():
    # librdkafka times a heartbeat out after one interval and retries it, not as a full request: the assignment
    # of the lost answer comes again while the member's heartbeat shows it has not taken it in.
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    ok(ctx.heartbeat("m2"))
    answer, _ = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))  # this answer is "lost"
    assert assignment_of(answer) == parts(foo=[0, 1, 2])
    answer, result = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))  # the retry
    assert assignment_of(answer) == parts(foo=[0, 1, 2]) and not result.records
    answer, _ = ctx.heartbeat(
        "m1", 1, owned=None
    )  # nothing sent about what it owns: still owes the revocation
    assert assignment_of(answer) == parts(foo=[0, 1, 2])


def test_an_assignment_is_sent_until_a_heartbeat_lists_it():
    # m2 waits for foo 3-5 at its epoch (unreleased); the answer that hands them over is lost and the retry lists
    # nothing it owns: the epoch does not move, so nothing else in the retry shows the answer was missed
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    ok(ctx.heartbeat("m2"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2])))  # released
    answer, _ = ctx.heartbeat("m2", 2, owned={})  # this answer is "lost"
    assert (answer.member_epoch, assignment_of(answer)) == (2, parts(foo=[3, 4, 5]))
    for _ in range(2):  # the retries (owned not sent) get it again, and write nothing
        answer, result = ctx.heartbeat("m2", 2, owned=None)
        assert assignment_of(answer) == parts(foo=[3, 4, 5]) and not result.records
    # a heartbeat listing it: taken in, and the next delta heartbeat is answered without it, as in Kafka
    answer, _ = ctx.heartbeat("m2", 2, owned=parts(foo=[3, 4, 5]))
    assert assignment_of(answer) is None
    answer, _ = ctx.heartbeat("m2", 2, owned=None)
    assert assignment_of(answer) is None
    assert "m2" not in ctx.group().unacked


def test_target_assignments_within_the_assignment_interval_are_batched():
    # group.consumer.assignment.interval.ms (KIP-1263): one target computation per interval
    ctx = ConsumerContext(assignment_interval_ms=1000, members_per_assignment_ms=0)
    ok(ctx.heartbeat("m1"))  # the first target: at once
    assert ctx.group().assignment_epoch == 1
    answer = ok(ctx.heartbeat("m2"))
    answer3 = ok(ctx.heartbeat("m3"))
    group = ctx.group()
    assert (group.group_epoch, group.assignment_epoch, str(group.state)) == (3, 1, "Assigning")
    assert (answer.member_epoch, answer3.member_epoch, assignment_of(answer)) == (1, 1, {})
    assert ctx.timer.is_scheduled("consumer-assignment-grp")
    (result,) = ctx.advance(1000)  # the interval ends: one target for both joins
    assert group.assignment_epoch == 3
    assert [rec.record_type(r.key) for r in result.records] == [7, 7, 7, 6]
    answer = ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    assert answer.member_epoch == 1 and assignment_of(answer) == parts(foo=range(2))  # revoking 2-5
    ctx.advance(400)
    ok(ctx.heartbeat("m4"))  # within the interval again
    assert ctx.group().assignment_epoch == 3
    ctx.advance(600)
    assert ctx.group().assignment_epoch == 4


def test_per_group_session_timeout_and_heartbeat_interval():
    # Kafka's group configs consumer.session.timeout.ms / consumer.heartbeat.interval.ms, within the server's bounds
    ctx = ConsumerContext()
    result = ctx.apply(ctx.shard.set_group_settings("s", "grp", {"consumer.session.timeout.ms": 1000}))
    assert ctx.answers.pop("s").error == ErrorCode.invalid_config and not result.records  # below the minimum
    ctx.apply(
        ctx.shard.set_group_settings(
            "s", "grp", {"consumer.session.timeout.ms": 50000, "consumer.heartbeat.interval.ms": 6000}
        )
    )
    answer = ctx.answers.pop("s")
    assert answer.error == ErrorCode.none, answer
    assert answer.data["effective_settings"]["consumer.session.timeout.ms"] == 50000
    joined = ok(ctx.heartbeat("m1"))
    assert joined.heartbeat_interval == datetime.timedelta(milliseconds=6000)
    assert ctx.timer.deadline_ms(session_key("grp", "m1")) == ctx.clock.monotonic_ms() + 50000
    ctx.apply(ctx.shard.set_group_settings("s", "grp", {"consumer.session.timeout.ms": None}))
    ok(ctx.heartbeat("m1", 1))
    assert ctx.timer.deadline_ms(session_key("grp", "m1")) == ctx.clock.monotonic_ms() + 45000


def test_registration_window_keeps_an_expired_static_member_and_its_partitions():
    ctx = ConsumerContext(registration_timeout_ms=20000, session_timeout_ms=45000)
    ok(ctx.heartbeat("s1", instance_id="i1"))
    ok(ctx.heartbeat("m2"))
    ok(ctx.heartbeat("s1", 1, owned=parts(foo=range(6)), instance_id="i1"))
    answer = ok(ctx.heartbeat("s1", 1, owned=parts(foo=range(3)), instance_id="i1"))
    held = ctx.group().members["s1"].assigned
    epoch = ctx.group().group_epoch
    for _ in range(10):  # m2 stays; s1's process is gone
        ctx.advance(5000)
        ok(
            ctx.heartbeat(
                "m2", ctx.group().members["m2"].member_epoch, owned=ctx.group().members["m2"].assigned
            )
        )
    group = ctx.group()
    assert "s1" in group.offline and group.members["s1"].assigned == held and group.group_epoch == epoch
    # its instance comes back under a new member id: the same partitions, no rebalance
    back = ok(ctx.heartbeat("s1-again", instance_id="i1"))
    assert assignment_of(back) == held and group.group_epoch == epoch and not group.offline
    assert answer.member_epoch == back.member_epoch


def test_registration_window_end_removes_every_offline_member_at_once():
    ctx = ConsumerContext(registration_timeout_ms=10000, session_timeout_ms=45000)
    ok(ctx.heartbeat("s1", instance_id="i1"))
    ok(ctx.heartbeat("s2", instance_id="i2"))
    epoch = ctx.group().group_epoch
    ctx.advance(45000)  # both sessions expire: offline, nothing moves
    group = ctx.group()
    assert set(group.offline) == {"s1", "s2"} and group.group_epoch == epoch
    ctx.advance(10000)
    assert not group.members and group.group_epoch == epoch + 1


def _offline_marks(records: list[CoordinatorRecord]) -> list[GroupOfflineValue | None]:
    marks = []
    for record in records:
        if record.key == new_group_offline_record("grp", {}).key:
            key, value = decode_record(record)
            assert isinstance(key, GroupOfflineKey)
            marks.append(value)
    return marks


def test_registration_window_is_written_and_goes_on_after_a_restart():
    ctx = ConsumerContext(registration_timeout_ms=20000, session_timeout_ms=45000)
    ok(ctx.heartbeat("s1", instance_id="i1"))
    ok(ctx.heartbeat("s2", instance_id="i2"))
    ok(ctx.heartbeat("s1", 1, owned=parts(foo=range(6)), instance_id="i1"))
    ok(ctx.heartbeat("s1", 1, owned=parts(foo=range(3)), instance_id="i1"))  # s1 gave s2's partitions up
    epoch = ctx.group().group_epoch
    went_offline_ms = ctx.clock.wall_ms() + 45000
    results = ctx.advance(45000)  # both sessions expire: offline, in one window
    written = _offline_marks([r for result in results for r in result.records])
    assert written[-1] == GroupOfflineValue((("s1", went_offline_ms), ("s2", went_offline_ms)))

    ctx.advance(5000)
    held = ctx.group().members["s1"].assigned
    ctx.clock.advance(3000)  # the coordinator is down for 3 s: its timers do not fire
    loaded = ctx.reload()
    group = loaded.consumer.groups["grp"]
    timer = loaded.consumer.timer
    assert set(group.offline) == {"s1", "s2"} and group.members["s1"].assigned == held
    assert group.group_epoch == epoch
    # no session timer: they are offline; the window ends 20 s after they went offline, 8 s ago
    assert not timer.is_scheduled(session_key("grp", "s1"))
    assert timer.deadline_ms(registration_key("grp")) == ctx.clock.monotonic_ms() + 12000

    # s1's instance comes back to the reloaded coordinator: its partitions, no rebalance, and s2 alone is written
    answers: dict[object, object] = {}
    result = loaded.consumer_group_heartbeat(
        "t", 1, heartbeat_request("s1-again", instance_id="i1"), client_id="c", client_host="/h"
    )
    for token, answer in result.responses:
        answers[token] = answer
    assert assignment_of(answers["t"]) == held and group.group_epoch == epoch
    assert _offline_marks(list(result.records)) == [GroupOfflineValue((("s2", went_offline_ms),))]
    for record in result.records:
        loaded.replay(record)
    ended = timer.advance(12000)  # s2 never comes back
    assert "s2" not in group.members and group.group_epoch == epoch + 1
    assert _offline_marks([r for result in ended for r in result.records]) == [None]


def test_a_restart_after_the_registration_window_ended_removes_the_offline_members():
    ctx = ConsumerContext(registration_timeout_ms=10000, session_timeout_ms=45000)
    ok(ctx.heartbeat("s1", instance_id="i1"))
    ok(ctx.heartbeat("m2"))
    epoch = ctx.group().group_epoch
    ctx.advance(40000)
    ok(ctx.heartbeat("m2", ctx.group().members["m2"].member_epoch, owned=ctx.group().members["m2"].assigned))
    ctx.advance(5000)  # s1 offline
    assert "s1" in ctx.group().offline
    ctx.clock.advance(60000)  # down for longer than the window
    loaded = ctx.reload()
    for result in loaded.consumer.timer.advance(0):
        for record in result.records:
            loaded.replay(record)
    group = loaded.consumer.groups["grp"]
    assert "s1" not in group.members and group.group_epoch == epoch + 1


def test_expansion_window_assigns_joiners_of_a_stable_group_together():
    ctx = ConsumerContext(expansion_timeout_ms=3000)
    ok(ctx.heartbeat("m1"))  # a new group: assigned at once
    assert str(ctx.group().state) == "Stable"
    joiner = ok(ctx.heartbeat("m2"))
    group = ctx.group()
    assert group.assignment_epoch == 1 and assignment_of(joiner) == {}
    ctx.advance(1000)
    ok(ctx.heartbeat("m3"))
    assert group.assignment_epoch == 1
    ctx.advance(2000)  # the window ends: one target for both joiners
    assert group.assignment_epoch == 3
    # a member leaving is assigned without waiting
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    ok(ctx.heartbeat("m3", -1))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    assert group.assignment_epoch == group.group_epoch == 4


def test_the_groups_subscription_follows_every_member_change_and_restore():
    """The group's subscribed topics and regexes are counted as members change (not recomputed over every member
    at each join and removal): after any mix of joins, changed subscriptions, removals and an undo, they are what
    the members subscribe to."""
    import random

    from coordinator.consumer.group import ConsumerGroup, ConsumerMember

    def expected(group: ConsumerGroup) -> tuple[set[str], set[str]]:
        names: set[str] = set()
        regexes = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
        for m in group.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(group.resolved.get(m.subscribed_topic_regex, ()))
        return names, regexes

    rng = random.Random(7)
    group = ConsumerGroup("grp")
    group.resolved = {"a.*": frozenset({"a1", "a2"}), "b.*": frozenset({"b1"})}
    snapshot = None
    for step in range(400):
        member_id = f"m{rng.randrange(12)}"
        if rng.random() < 0.3:
            group.remove_member(member_id)
        else:
            topics = tuple(rng.sample(["t1", "t2", "t3", "a1"], rng.randrange(3)))
            regex = rng.choice([None, None, "a.*", "b.*"])
            group.update_member(
                ConsumerMember(member_id, subscribed_topic_names=topics, subscribed_topic_regex=regex)
            )
        if step == 150:
            snapshot = group.snapshot()
        if step == 300 and snapshot is not None:
            group.restore(snapshot)
        assert (group.subscribed_topic_names(), group.subscribed_regexes()) == expected(group), step
