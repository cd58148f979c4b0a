"""Replay and loading: a log written while serving loads back into the same durable state; GroupMetadata
records replay as no-ops while serving; on_loaded re-arms sessions and rebalances oversized groups;
on_unloaded answers every parked request.

Scenarios are ported from Kafka's GroupMetadataManagerTest where one exists; each test names its upstream
test.
"""

from __future__ import annotations

import struct

import pytest

from coordinator.clock import ManualClock, ManualTimer, session_timeout_key
from coordinator.group import ClassicGroupState
from coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode_key,
    encode_value,
    new_group_metadata_tombstone,
)
from coordinator.shard import GroupCoordinatorShard
from protocol.errors import ErrorCode

from .context import GroupTestContext, subscription, to_protocols

S = ClassicGroupState


def group_metadata_record(group_id: str, value: GroupMetadataValue, version: int = 3) -> CoordinatorRecord:
    return CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), encode_value(value, version))


def members(rebalance_timeout_ms: int = 9000) -> tuple[MemberMetadata, ...]:
    return tuple(
        MemberMetadata(
            f"member-{i}",
            f"group-instance-id-{i}",
            f"client-{i}",
            f"host-{i}",
            rebalance_timeout_ms,
            4000,
            subscription("foo"),
            b"\x02",
        )
        for i in range(2)
    )


@pytest.mark.parametrize("use_default_rebalance_timeout", [True, False])
@pytest.mark.parametrize("version", [3, 4])
def test_replay_group_metadata_records(use_default_rebalance_timeout, version):
    # testReplayGroupMetadataRecords
    ctx = GroupTestContext(loaded=False)
    value = GroupMetadataValue(
        "consumer",
        1,
        "range",
        "member-0",
        ctx.clock.wall_ms(),
        members(-1 if use_default_rebalance_timeout else 9000),
    )
    ctx.shard.replay(group_metadata_record("group-id", value, version))
    group = ctx.group()
    assert (
        group.group_id,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
    ) == ("group-id", 1, "consumer", "range", "member-0")
    assert group.is_in_state(S.STABLE)
    assert group.current_state_timestamp_ms == ctx.clock.wall_ms()
    assert group.join_response_members() == [
        {
            "member_id": f"member-{i}",
            "group_instance_id": f"group-instance-id-{i}",
            "metadata": subscription("foo"),
        }
        for i in range(2)
    ]
    for i in range(2):
        member = group.member(f"member-{i}")
        assert member.rebalance_timeout_ms == (4000 if use_default_rebalance_timeout else 9000)
        assert member.session_timeout_ms == 4000
        assert member.assignment == b"\x02"
        assert (member.client_id, member.client_host) == (f"client-{i}", f"host-{i}")
    assert group.subscribed_topics == frozenset({"foo"})


def test_replay_v0_record_uses_session_timeout_and_has_no_instance_ids():
    ctx = GroupTestContext(loaded=False)
    ctx.shard.replay(
        group_metadata_record(
            "g", GroupMetadataValue("consumer", 3, "range", "member-0", -1, members()), version=0
        )
    )
    member = ctx.group("g").member("member-0")
    assert member.rebalance_timeout_ms == 4000
    assert member.group_instance_id is None
    assert ctx.group("g").current_state_timestamp_ms == -1


def test_replay_empty_group_and_tombstone():
    ctx = GroupTestContext(loaded=False)
    ctx.shard.replay(group_metadata_record("g", GroupMetadataValue("consumer", 5, None, None, 77, ())))
    group = ctx.group("g")
    assert group.is_in_state(S.EMPTY) and group.generation_id == 5 and group.protocol_type == "consumer"
    ctx.shard.replay(new_group_metadata_tombstone("g"))
    assert "g" not in ctx.shard.groups


def test_replay_skips_unknown_record_types():
    # Type 10 is a share group record (KIP-932): not served here, skipped on load.
    ctx = GroupTestContext(loaded=False)
    ctx.shard.replay(CoordinatorRecord(struct.pack(">h", 10) + b"\x00\x01g", b"\x00\x00"))
    assert not ctx.shard.groups


def test_on_loaded_exceed_group_max_size_triggers_rebalance():
    # testOnLoadedExceedGroupMaxSizeTriggersRebalance
    ctx = GroupTestContext(loaded=False, group_max_size=1)
    ctx.shard.replay(
        group_metadata_record(
            "group-id", GroupMetadataValue("consumer", 1, "range", "member-0", ctx.clock.wall_ms(), members())
        )
    )
    ctx.apply(ctx.shard.on_loaded())
    group = ctx.group()
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert group.num_members() == 2


def test_on_loaded_schedules_classic_group_member_heartbeats():
    # testOnLoadedSchedulesClassicGroupMemberHeartbeats
    ctx = GroupTestContext(loaded=False)
    ctx.shard.replay(
        group_metadata_record(
            "group-id", GroupMetadataValue("consumer", 1, "range", "member-0", ctx.clock.wall_ms(), members())
        )
    )
    ctx.apply(ctx.shard.on_loaded())
    for i in range(2):
        assert ctx.session_deadline(f"member-{i}") == 4000


def test_group_metadata_records_written_while_serving_replay_as_no_ops():
    ctx = GroupTestContext()
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    # a static replacement writes a record; before it is replayed, the group moves on (the leader rejoins)
    rejoin = ctx.join_group(
        group_instance_id="follower", protocols=to_protocols("range", "roundrobin"), version=9, apply=False
    )
    ctx.join_group(
        member_id=result.leader_id,
        group_instance_id="leader",
        protocols=to_protocols("range", "roundrobin"),
        version=5,
    )
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.apply(rejoin.result)  # the (now stale) record is replayed
    assert ctx.group() is group
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert not ctx.shard.calls.unreplayed


def test_a_failed_group_record_is_forgotten():
    ctx = GroupTestContext()
    call = ctx.join_group(group_instance_id="instance", version=5, apply=False)
    [record] = call.records  # the new group's record
    ctx.fail(call.result)
    assert not ctx.shard.calls.unreplayed
    assert "group-id" not in ctx.shard.groups
    # the same bytes read from a log (another coordinator wrote them) are applied
    ctx.shard.replay(record)
    assert ctx.group().is_in_state(S.EMPTY)


def test_restart_restores_stable_group_members_assignments_and_offsets():
    ctx = GroupTestContext()
    result = ctx.static_members_join_and_rebalance()
    ctx.commit(
        offsets={("foo", 0): 42},
        member_id=result.leader_id,
        generation_id=1,
        group_instance_id="leader",
        metadata="m",
    )
    ctx.commit("simple", {("bar", 1): 7})
    fresh = ctx.restart()
    group = fresh.group()
    assert group.is_in_state(S.STABLE)
    assert group.generation_id == 1
    assert group.leader_id == result.leader_id
    assert group.static_member_id("leader") == result.leader_id
    assert group.static_member_id("follower") == result.follower_id
    assert group.group_assignment() == {result.leader_id: b"\x01", result.follower_id: b"\x02"}
    assert fresh.shard.offsets.store.get("group-id", "foo", 0).committed_offset == 42
    assert fresh.shard.offsets.store.get("group-id", "foo", 0).metadata == "m"
    assert fresh.group("simple").is_simple_group()
    # members carry on without a rebalance
    sync = fresh.sync_group(member_id=result.follower_id, generation_id=1, group_instance_id="follower")
    assert sync.response.assignment == b"\x02"
    assert (
        fresh.heartbeat(member_id=result.leader_id, generation_id=1, group_instance_id="leader").error
        == ErrorCode.none
    )
    # a restarted static member replaces its id in place (rolling restart, no rebalance)
    rejoin = fresh.join_group(
        group_instance_id="follower", protocols=to_protocols("range", "roundrobin"), version=9
    )
    assert rejoin.error == ErrorCode.none
    assert group.generation_id == 1 and group.is_in_state(S.STABLE)


def test_restart_after_static_replacement_loads_the_new_member_id():
    ctx = GroupTestContext()
    ctx.static_members_join_and_rebalance()
    rejoin = ctx.join_group(
        group_instance_id="leader", protocols=to_protocols("range", "roundrobin"), version=9
    )
    fresh = ctx.restart()
    assert fresh.group().static_member_id("leader") == rejoin.response.member_id
    assert fresh.group().leader_id == rejoin.response.member_id


def test_restart_of_a_group_mid_rebalance_loads_its_last_written_state():
    ctx = GroupTestContext()
    result = ctx.static_members_join_and_rebalance()
    ctx.join_group(
        member_id=result.leader_id,
        group_instance_id="leader",
        protocols=to_protocols("range", "roundrobin"),
        version=5,
    )
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)
    fresh = ctx.restart()
    assert fresh.group().is_in_state(S.STABLE) and fresh.group().generation_id == 1


def test_restart_loads_deleted_groups_as_gone():
    ctx = GroupTestContext()
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    ctx.leave_group(members=[(leader.member_id, None)])
    ctx.send("delete_groups", 42, 2, "delete", groups_names=["group-id"])
    fresh = ctx.restart()
    assert "group-id" not in fresh.shard.groups


def test_restarted_members_expire_if_they_do_not_come_back():
    ctx = GroupTestContext()
    result = ctx.static_members_join_and_rebalance(session_timeout_ms=5000)
    fresh = ctx.restart()
    assert fresh.session_deadline(result.leader_id) == 5000
    fresh.advance(5000)
    assert fresh.group().is_in_state(S.EMPTY)


def test_on_unloaded_answers_parked_requests_not_coordinator():
    ctx = GroupTestContext()
    ctx.create_group()
    join = ctx.join_group()
    ctx.apply(ctx.shard.on_unloaded())
    assert join.error == ErrorCode.not_coordinator
    assert not ctx.shard.groups
    assert not ctx.timer.keys()


def test_settings_from_kafka_names():
    config = {
        "group.min.session.timeout.ms": "100",
        "group.max.size": 7,
        "offsets.retention.minutes": 2,
        "group.initial.rebalance.delay.ms": 0,
        "offset.metadata.max.bytes": 10,
        "group.max.session.timeout.ms": 1000,
    }
    clock = ManualClock()
    manager = GroupCoordinatorShard(clock, ManualTimer(clock), config)
    s = manager.settings
    assert (
        s.group_min_session_timeout_ms,
        s.group_max_session_timeout_ms,
        s.group_max_size,
        s.group_initial_rebalance_delay_ms,
        s.offset_metadata_max_bytes,
        s.offsets_retention_ms,
    ) == (100, 1000, 7, 0, 10, 120_000)
    assert manager.offsets.offsets_retention_ms == 120_000


def test_settings_from_the_project_config():
    from coordinator.config import Config

    clock = ManualClock()
    manager = GroupCoordinatorShard(
        clock, ManualTimer(clock), Config({"group.initial.rebalance.delay.ms": "0"}), group_max_size=3
    )
    assert manager.settings.group_initial_rebalance_delay_ms == 0
    assert manager.settings.group_max_size == 3
    assert manager.settings.group_min_session_timeout_ms == 6000


def test_session_keys_of_loaded_members():
    ctx = GroupTestContext(loaded=False)
    ctx.shard.replay(
        group_metadata_record("g", GroupMetadataValue("consumer", 1, "range", "member-0", 1, members()))
    )
    ctx.apply(ctx.shard.on_loaded())
    assert ctx.timer.keys() == {session_timeout_key("g", "member-0"), session_timeout_key("g", "member-1")}
