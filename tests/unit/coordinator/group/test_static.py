"""Static membership (KIP-345): replacement without rebalance, fencing, persistence before the answer, revert
on a failed write, the old leader id before v9 and SkipAssignment from v9 (KIP-814).

Scenarios are ported from Kafka's GroupMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import pytest

from coordinator.group import ClassicGroupState
from coordinator.records import GroupMetadataKey, decode_record, group_metadata_value
from protocol.errors import ErrorCode

from .context import GroupTestContext, join_answer, to_protocols

S = ClassicGroupState
DELAY = 3000
SUPERSET = to_protocols("range", "roundrobin")


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


def members_list(group) -> list[dict]:
    return group.join_response_members()


def test_static_member_join_as_first_member(ctx):
    # testStaticMemberJoinAsFirstMember
    ctx.create_group()
    call = ctx.join_group(group_instance_id="group-instance-id", version=9)
    ctx.advance(DELAY)
    assert call.error == ErrorCode.none


def test_join_group_replace_static_member(ctx):
    # testJoinGroupReplaceStaticMember: a duplicate during the initial rebalance fences the first
    ctx.create_group()
    group = ctx.group()
    old = ctx.join_group(group_instance_id="group-instance-id", session_timeout_ms=5000)
    assert not old.records and not old.done
    assert group.num_awaiting_join() == 1 and group.num_members() == 1
    new = ctx.join_group(group_instance_id="group-instance-id", session_timeout_ms=5000)
    assert not new.records and not new.done
    assert old.error == ErrorCode.fenced_instance_id
    assert group.num_awaiting_join() == 1 and group.num_members() == 1
    ctx.advance(DELAY)
    assert new.error == ErrorCode.none
    assert group.num_awaiting_join() == 0 and group.num_members() == 1


def test_static_member_rejoin_with_explicit_unknown_member_id(ctx):
    # testStaticMemberRejoinWithExplicitUnknownMemberId
    ctx.create_group()
    call = ctx.join_group(
        group_instance_id="group-instance-id", session_timeout_ms=5000, rebalance_timeout_ms=5000, version=9
    )
    ctx.advance(DELAY)
    assert call.error == ErrorCode.none
    rejoin = ctx.join_group(member_id="unknown-member-id", group_instance_id="group-instance-id", version=9)
    assert not rejoin.records
    assert rejoin.error == ErrorCode.fenced_instance_id


@pytest.mark.parametrize("version", [5, 9])
def test_replace_static_member_in_stable_state_no_error(ctx, version):
    # testReplaceStaticMemberInStableStateNoError
    ctx.create_group()
    first = ctx.join_group(
        group_instance_id="group-instance-id", protocols=to_protocols("range"), version=version
    )
    ctx.advance(DELAY)
    old_member_id = first.response.member_id
    group = ctx.group()
    assert group.num_members() == 1 and group.generation_id == 1
    assert ctx.sync_group(member_id=old_member_id, generation_id=1).error == ErrorCode.none
    assert group.is_in_state(S.STABLE)

    protocols = to_protocols("range", "roundrobin")
    rejoin = ctx.join_group(
        group_instance_id="group-instance-id",
        protocols=protocols,
        rebalance_timeout_ms=7000,
        session_timeout_ms=4500,
        version=version,
        apply=False,
    )
    new_member_id = group.static_member_id("group-instance-id")
    # the new member id is persisted; the answer waits for that record
    assert [decode_record(r) for r in rejoin.records] == [
        (GroupMetadataKey("group-id"), group_metadata_value(group, group.group_assignment()))
    ]
    ctx.apply(rejoin.result)
    if version >= 9:
        expected = join_answer(
            version,
            member_id=new_member_id,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            leader=new_member_id,
            members=members_list(group),
            skip_assignment=True,
        )
    else:
        expected = join_answer(
            version,
            member_id=new_member_id,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            leader=old_member_id,
        )
    assert rejoin.response == expected
    member = group.member(new_member_id)
    assert member.group_instance_id == "group-instance-id"
    assert member.rebalance_timeout_ms == 7000
    assert member.session_timeout_ms == 4500
    assert member.protocols == protocols
    assert group.num_members() == 1 and group.generation_id == 1
    assert group.is_in_state(S.STABLE)
    # As in Kafka, the new id's session timer starts before the new timeouts apply; the next heartbeat uses
    # them.
    assert ctx.session_deadline(new_member_id) == 500
    ctx.heartbeat(member_id=new_member_id, generation_id=1, group_instance_id="group-instance-id")
    assert ctx.session_deadline(new_member_id) == 4500


def test_replace_static_member_in_stable_state_with_updated_protocol_triggers_rebalance(ctx):
    # testReplaceStaticMemberInStableStateWithUpdatedProtocolTriggersRebalance
    ctx.create_group()
    first = ctx.join_group(group_instance_id="group-instance-id", protocols=SUPERSET, version=9)
    ctx.advance(DELAY)
    group = ctx.group()
    ctx.sync_group(member_id=first.response.member_id, generation_id=1)
    rejoin = ctx.join_group(group_instance_id="group-instance-id", protocols=to_protocols("roundrobin"))
    assert not rejoin.records
    assert rejoin.error == ErrorCode.none
    assert group.num_members() == 1
    assert group.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_replace_static_member_in_stable_state_errors(ctx):
    # testReplaceStaticMemberInStableStateErrors: the write fails, the member gets its old id back
    ctx.create_group()
    protocols = to_protocols("range")
    first = ctx.join_group(
        group_instance_id="group-instance-id",
        protocols=protocols,
        rebalance_timeout_ms=4000,
        session_timeout_ms=3000,
    )
    ctx.advance(DELAY)
    old_member_id = first.response.member_id
    group = ctx.group()
    ctx.sync_group(member_id=old_member_id, generation_id=1)
    assert group.is_in_state(S.STABLE)

    rejoin = ctx.join_group(
        group_instance_id="group-instance-id",
        protocols=protocols + to_protocols("x", "rr")[1:],
        rebalance_timeout_ms=7000,
        session_timeout_ms=6000,
        apply=False,
    )
    assert [decode_record(r) for r in rejoin.records] == [
        (GroupMetadataKey("group-id"), group_metadata_value(group, group.group_assignment()))
    ]
    ctx.fail(rejoin.result, ErrorCode.coordinator_not_available)
    assert rejoin.response == join_answer(
        3,
        error=ErrorCode.coordinator_not_available,
        member_id="",
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=old_member_id,
    )
    reverted = group.member(group.static_member_id("group-instance-id"))
    assert reverted.member_id == old_member_id
    assert reverted.rebalance_timeout_ms == 4000
    assert reverted.session_timeout_ms == 3000
    assert reverted.protocols == protocols
    assert group.num_members() == 1 and group.generation_id == 1
    assert group.is_in_state(S.STABLE)
    assert ctx.session_deadline(old_member_id) == 3000


@pytest.mark.parametrize("version", [5, 9])
def test_replace_static_member_in_stable_state_succeeds(ctx, version):
    # testReplaceStaticMemberInStableStateSucceeds
    ctx.create_group()
    first = ctx.join_group(
        group_instance_id="group-instance-id", protocols=to_protocols("range"), version=version
    )
    ctx.advance(DELAY)
    old_member_id = first.response.member_id
    group = ctx.group()
    ctx.sync_group(member_id=old_member_id, generation_id=1)
    rejoin = ctx.join_group(
        group_instance_id="group-instance-id",
        protocols=SUPERSET,
        rebalance_timeout_ms=7000,
        session_timeout_ms=6000,
        version=version,
    )
    new_member_id = rejoin.response.member_id
    assert new_member_id != old_member_id
    assert rejoin.response.leader == (new_member_id if version >= 9 else old_member_id)
    assert rejoin.response.skip_assignment is (version >= 9)
    assert (len(rejoin.response.members) == 1) is (version >= 9)
    member = group.member(group.static_member_id("group-instance-id"))
    assert member.member_id == new_member_id
    assert (member.rebalance_timeout_ms, member.session_timeout_ms, member.protocols) == (
        7000,
        6000,
        SUPERSET,
    )
    assert group.generation_id == 1 and group.is_in_state(S.STABLE)


def test_replace_static_member_in_completing_rebalance_state_triggers_rebalance(ctx):
    # testReplaceStaticMemberInCompletingRebalanceStateTriggersRebalance
    ctx.create_group()
    first = ctx.join_group(group_instance_id="group-instance-id", version=9)
    ctx.advance(DELAY)
    assert first.error == ErrorCode.none
    group = ctx.group()
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    rejoin = ctx.join_group(group_instance_id="group-instance-id")
    assert not rejoin.records
    assert rejoin.error == ErrorCode.none
    assert group.num_members() == 1
    assert group.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_static_member_fence_duplicate_rejoined_follower(ctx):
    # testStaticMemberFenceDuplicateRejoinedFollower
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    ctx.join_group()  # a third member: rebalance
    assert group.is_in_state(S.PREPARING_REBALANCE)
    old_follower = ctx.join_group(member_id=result.follower_id, group_instance_id="follower")
    assert not old_follower.records and not old_follower.done
    ctx.join_group(group_instance_id="follower")  # the duplicate
    assert old_follower.response == join_answer(
        3, error=ErrorCode.fenced_instance_id, member_id=result.follower_id
    )
    assert group.is_in_state(S.PREPARING_REBALANCE)


def test_static_member_fence_duplicate_syncing_follower_after_member_id_changed(ctx):
    # testStaticMemberFenceDuplicateSyncingFollowerAfterMemberIdChanged
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    leader_join = ctx.join_group(
        member_id=result.leader_id, group_instance_id="leader", protocols=SUPERSET, rebalance_timeout_ms=10000
    )
    assert not leader_join.done
    assert group.is_in_state(S.PREPARING_REBALANCE)
    old_follower = ctx.join_group(
        member_id=result.follower_id,
        group_instance_id="follower",
        protocols=SUPERSET,
        rebalance_timeout_ms=10000,
    )
    assert old_follower.done and leader_join.done
    assert leader_join.response == join_answer(
        3,
        member_id=result.leader_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
        members=members_list(group),
    )
    assert old_follower.response == join_answer(
        3,
        member_id=result.follower_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )
    assert group.is_in_state(S.COMPLETING_REBALANCE)

    old_follower_sync = ctx.sync_group(
        member_id=result.follower_id, generation_id=2, group_instance_id="follower"
    )
    assert not old_follower_sync.records and not old_follower_sync.done
    duplicate = ctx.join_group(group_instance_id="follower", protocols=SUPERSET, rebalance_timeout_ms=10000)
    assert not duplicate.records
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert not duplicate.done
    assert old_follower_sync.error == ErrorCode.fenced_instance_id

    # the join phase completes with the duplicate; the leader, which did not rejoin, expires
    results = ctx.advance(10000)
    assert len(results) == 2 and all(not r.records for r in results)
    assert duplicate.done
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert group.generation_id == 3
    assert group.all_member_ids() == [duplicate.response.member_id]
    assert duplicate.response.leader == duplicate.response.member_id


def test_static_member_fence_duplicate_rejoining_follower_after_member_id_changed(ctx):
    # testStaticMemberFenceDuplicateRejoiningFollowerAfterMemberIdChanged
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    leader_join = ctx.join_group(
        member_id=result.leader_id,
        group_instance_id="leader",
        rebalance_timeout_ms=10000,
        protocols=to_protocols("range"),
    )
    assert not leader_join.done
    duplicate = ctx.join_group(
        group_instance_id="follower", rebalance_timeout_ms=10000, protocols=to_protocols("range")
    )
    assert not duplicate.records and duplicate.done
    old_follower = ctx.join_group(
        member_id=result.follower_id,
        group_instance_id="follower",
        rebalance_timeout_ms=10000,
        protocols=to_protocols("range"),
    )
    assert not old_follower.records and old_follower.done
    assert leader_join.response == join_answer(
        3,
        member_id=result.leader_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
        members=members_list(group),
    )
    assert duplicate.response == join_answer(
        3,
        member_id=duplicate.response.member_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )
    assert old_follower.response == join_answer(
        3, error=ErrorCode.fenced_instance_id, member_id=result.follower_id
    )


def test_static_member_rejoin_with_known_member_id(ctx):
    # testStaticMemberRejoinWithKnownMemberId
    ctx.create_group()
    first = ctx.join_group(group_instance_id="group-instance-id")
    ctx.advance(DELAY)
    member_id = first.response.member_id
    rejoin = ctx.join_group(member_id=member_id, group_instance_id="group-instance-id")
    assert not rejoin.records and rejoin.error == ErrorCode.none
    group = ctx.group()
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    sync = ctx.sync_group(member_id=member_id, generation_id=1, group_instance_id="group-instance-id")
    assert sync.error == ErrorCode.none
    assert group.is_in_state(S.STABLE)


@pytest.mark.parametrize("version", [5, 9])
def test_static_member_rejoin_with_leader_id_and_unknown_member_id(ctx, version):
    # testStaticMemberRejoinWithLeaderIdAndUnknownMemberId: no rebalance; before v9 the answer names the old
    # leader id, so the restarted leader acts as a follower; from v9 it gets the members and SkipAssignment.
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    rejoin = ctx.join_group(group_instance_id="leader", protocols=SUPERSET, version=version, apply=False)
    assert [decode_record(r) for r in rejoin.records] == [
        (GroupMetadataKey("group-id"), group_metadata_value(group, group.group_assignment()))
    ]
    ctx.apply(rejoin.result)
    new_leader_id = rejoin.response.member_id
    if version >= 9:
        expected = join_answer(
            version,
            member_id=new_leader_id,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            leader=new_leader_id,
            members=members_list(group),
            skip_assignment=True,
        )
    else:
        expected = join_answer(
            version,
            member_id=new_leader_id,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            leader=result.leader_id,
        )
    assert rejoin.response == expected
    assert group.is_in_state(S.STABLE)
    assert group.leader_id == new_leader_id  # leadership moved to the new id

    old_leader_join = ctx.join_group(
        member_id=result.leader_id, group_instance_id="leader", protocols=SUPERSET, version=version
    )
    assert not old_leader_join.records
    assert old_leader_join.error == ErrorCode.fenced_instance_id
    old_leader_sync = ctx.sync_group(member_id=result.leader_id, generation_id=1, group_instance_id="leader")
    assert old_leader_sync.error == ErrorCode.fenced_instance_id
    assert ctx.sync_group(member_id=result.leader_id, generation_id=1).error == ErrorCode.unknown_member_id
    # the follower is untouched, and the new leader id syncs the stored assignment
    new_leader_sync = ctx.sync_group(member_id=new_leader_id, generation_id=1, group_instance_id="leader")
    assert new_leader_sync.response.assignment == result.leader_assignment


def test_static_member_rejoin_with_leader_id_and_known_member_id(ctx):
    # testStaticMemberRejoinWithLeaderIdAndKnownMemberId: a known leader rejoining rebalances
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    rejoin = ctx.join_group(
        member_id=result.leader_id, group_instance_id="leader", rebalance_timeout_ms=10000, version=9
    )
    ctx.advance(10000)
    assert not group.has_member(result.follower_id)  # its session expired meanwhile
    assert rejoin.response == join_answer(
        9,
        member_id=result.leader_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
        members=members_list(group),
    )
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_static_member_rejoin_with_follower_id_and_change_of_protocol(ctx):
    # testStaticMemberRejoinWithFollowerIdAndChangeOfProtocol
    result = ctx.static_members_join_and_rebalance(rebalance_timeout_ms=10000, session_timeout_ms=15000)
    group = ctx.group()
    rejoin = ctx.join_group(
        member_id=result.follower_id,
        group_instance_id="follower",
        protocols=to_protocols("roundrobin"),
        rebalance_timeout_ms=10000,
        session_timeout_ms=15000,
    )
    assert not rejoin.records and not rejoin.done
    ctx.advance(10000)  # the old leader does not rejoin: re-election
    assert rejoin.error == ErrorCode.none
    assert group.has_static_member("leader")
    assert group.is_leader(result.follower_id)
    assert rejoin.response == join_answer(
        3,
        member_id=result.follower_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="roundrobin",
        leader=result.follower_id,
        members=members_list(group),
    )


def test_static_member_rejoin_with_unknown_member_id_and_change_of_protocol_with_selected_protocol_changed(
    ctx,
):
    # testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWithSelectedProtocolChanged
    ctx.static_members_join_and_rebalance(rebalance_timeout_ms=10000, session_timeout_ms=15000)
    group = ctx.group()
    assert group.select_protocol() != "roundrobin"
    rejoin = ctx.join_group(
        group_instance_id="follower",
        protocols=to_protocols("roundrobin"),
        rebalance_timeout_ms=10000,
        session_timeout_ms=15000,
    )
    assert not rejoin.records and not rejoin.done
    assert group.select_protocol() == "roundrobin"
    ctx.advance(10000)
    assert rejoin.error == ErrorCode.none
    assert group.has_static_member("leader")
    new_id = rejoin.response.member_id
    assert group.is_leader(new_id)
    assert rejoin.response == join_answer(
        3,
        member_id=new_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="roundrobin",
        leader=new_id,
        members=members_list(group),
    )


def test_static_member_rejoin_with_unknown_member_id_and_change_of_protocol_while_select_protocol_unchanged(
    ctx,
):
    # testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWhileSelectProtocolUnchanged
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    rejoin = ctx.join_group(
        group_instance_id="follower", protocols=to_protocols(group.select_protocol()), version=9, apply=False
    )
    assert [decode_record(r) for r in rejoin.records] == [
        (GroupMetadataKey("group-id"), group_metadata_value(group, group.group_assignment()))
    ]
    ctx.apply(rejoin.result)
    new_follower_id = rejoin.response.member_id
    assert rejoin.response == join_answer(
        9,
        member_id=new_follower_id,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )
    assert group.is_in_state(S.STABLE)
    assert new_follower_id != result.follower_id
    old = ctx.join_group(
        member_id=result.follower_id, group_instance_id="follower", protocols=to_protocols("range"), version=9
    )
    assert not old.records and old.error == ErrorCode.fenced_instance_id
    old_sync = ctx.sync_group(member_id=result.follower_id, generation_id=1, group_instance_id="follower")
    assert old_sync.error == ErrorCode.fenced_instance_id
    new_sync = ctx.sync_group(member_id=new_follower_id, generation_id=1, group_instance_id="follower")
    assert not new_sync.records
    assert new_sync.response.assignment == result.follower_assignment


def test_static_member_rejoin_with_unknown_member_id_and_change_of_protocol_persistence_failure(ctx):
    # testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWhileSelectProtocolUnchanged
    # PersistenceFailure
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    rejoin = ctx.join_group(
        group_instance_id="follower", protocols=to_protocols("range"), version=9, apply=False
    )
    ctx.fail(rejoin.result, ErrorCode.coordinator_not_available)
    assert rejoin.response == join_answer(
        9,
        error=ErrorCode.coordinator_not_available,
        member_id="",
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )
    assert group.static_member_id("follower") == result.follower_id
    assert group.member(result.follower_id).protocols == SUPERSET
    # the original follower id still works
    sync = ctx.sync_group(member_id=result.follower_id, generation_id=1, group_instance_id="follower")
    assert sync.response.assignment == result.follower_assignment


def test_static_member_rejoin_as_follower_with_unknown_member_id(ctx):
    # testStaticMemberRejoinAsFollowerWithUnknownMemberId
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    rejoin = ctx.join_group(group_instance_id="follower", protocols=SUPERSET, version=9)
    assert rejoin.records
    assert group.has_static_member("leader")
    assert rejoin.response == join_answer(
        9,
        member_id=rejoin.response.member_id,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )
    assert group.is_in_state(S.STABLE)
    assert rejoin.response.member_id != result.follower_id
    sync = ctx.sync_group(member_id=rejoin.response.member_id, generation_id=1, group_instance_id="follower")
    assert not sync.records
    assert sync.response.assignment == result.follower_assignment


def test_static_member_rejoin_as_follower_with_known_member_id_and_no_protocol_change(ctx):
    # testStaticMemberRejoinAsFollowerWithKnownMemberIdAndNoProtocolChange
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    rejoin = ctx.join_group(
        member_id=result.follower_id, group_instance_id="follower", protocols=SUPERSET, version=9
    )
    assert not rejoin.records
    assert rejoin.response == join_answer(
        9,
        member_id=result.follower_id,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )
    assert group.is_in_state(S.STABLE)


def test_static_member_rejoin_as_follower_with_mismatched_instance_id(ctx):
    # testStaticMemberRejoinAsFollowerWithMismatchedInstanceId
    result = ctx.static_members_join_and_rebalance()
    call = ctx.join_group(
        member_id=result.follower_id, group_instance_id="leader", protocols=SUPERSET, version=9
    )
    assert not call.records and call.error == ErrorCode.fenced_instance_id


def test_static_member_rejoin_as_leader_with_mismatched_instance_id(ctx):
    # testStaticMemberRejoinAsLeaderWithMismatchedInstanceId
    result = ctx.static_members_join_and_rebalance()
    call = ctx.join_group(
        member_id=result.leader_id, group_instance_id="follower", protocols=SUPERSET, version=9
    )
    assert not call.records and call.error == ErrorCode.fenced_instance_id


def test_static_member_sync_as_leader_with_invalid_member_id(ctx):
    # testStaticMemberSyncAsLeaderWithInvalidMemberId
    ctx.static_members_join_and_rebalance()
    call = ctx.sync_group(member_id="invalid-member-id", generation_id=1, group_instance_id="follower")
    assert not call.records and call.error == ErrorCode.fenced_instance_id


def test_fenced_instance_id_on_every_api(ctx):
    result = ctx.static_members_join_and_rebalance()
    assert (
        ctx.heartbeat(member_id="other", generation_id=1, group_instance_id="leader").error
        == ErrorCode.fenced_instance_id
    )
    commit = ctx.commit(member_id="other", generation_id=1, group_instance_id="leader")
    assert commit.response.topics[0].partitions[0].error_code == ErrorCode.fenced_instance_id
    leave = ctx.leave_group(members=[("other", "leader")])
    assert leave.response.members[0].error_code == ErrorCode.fenced_instance_id
    assert ctx.group().has_member(result.leader_id)


def test_get_different_static_member_id_after_each_rejoin(ctx):
    # testGetDifferentStaticMemberIdAfterEachRejoin
    result = ctx.static_members_join_and_rebalance()
    group = ctx.group()
    last = result.leader_id
    for _ in range(5):
        rejoin = ctx.join_group(group_instance_id="leader", protocols=SUPERSET, version=9, apply=False)
        expected_record = (
            GroupMetadataKey("group-id"),
            group_metadata_value(group, group.group_assignment()),
        )
        assert [decode_record(r) for r in rejoin.records] == [expected_record]
        ctx.apply(rejoin.result)
        assert rejoin.error == ErrorCode.none
        assert rejoin.response.member_id == group.static_member_id("leader")
        assert rejoin.response.member_id != last
        last = rejoin.response.member_id


def test_static_member_join_with_unknown_instance_id_and_known_member_id(ctx):
    # testStaticMemberJoinWithUnknownInstanceIdAndKnownMemberId
    result = ctx.static_members_join_and_rebalance()
    call = ctx.join_group(
        member_id=result.leader_id, group_instance_id="unknown-instance-id", protocols=SUPERSET, version=9
    )
    assert not call.records and call.error == ErrorCode.unknown_member_id


def test_static_member_follower_fail_to_rejoin_before_rebalance_timeout(ctx):
    # testStaticMemberFollowerFailToRejoinBeforeRebalanceTimeout
    result = ctx.static_members_join_and_rebalance(rebalance_timeout_ms=10000, session_timeout_ms=15000)
    group = ctx.group()
    new = ctx.join_group(group_instance_id="new-member-instance-id", protocols=SUPERSET, version=9)
    assert not new.records and not new.done
    assert group.is_in_state(S.PREPARING_REBALANCE)
    leader = ctx.join_group(
        member_id=result.leader_id, group_instance_id="leader", protocols=SUPERSET, version=9
    )
    assert not leader.records and not leader.done
    ctx.advance(10000)
    assert leader.response == join_answer(
        9,
        member_id=result.leader_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
        members=members_list(group),
    )
    assert len(leader.response.members) == 3  # the follower that did not rejoin stays: it is static
    assert new.response == join_answer(
        9,
        member_id=new.response.member_id,
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=result.leader_id,
    )


def test_static_member_leader_fail_to_rejoin_before_rebalance_timeout(ctx):
    # testStaticMemberLeaderFailToRejoinBeforeRebalanceTimeout
    result = ctx.static_members_join_and_rebalance(rebalance_timeout_ms=10000, session_timeout_ms=15000)
    group = ctx.group()
    new = ctx.join_group(group_instance_id="new-member-instance-id", protocols=SUPERSET, version=9)
    follower = ctx.join_group(
        member_id=result.follower_id, group_instance_id="follower", protocols=SUPERSET, version=9
    )
    ctx.advance(10000)
    responses = [new.response, follower.response]
    leader_response = next(r for r in responses if r.leader == r.member_id)
    follower_response = next(r for r in responses if r.leader != r.member_id)
    assert leader_response.member_id != result.leader_id  # a member that rejoined is elected
    assert leader_response.members == join_answer(9, members=members_list(group)).members
    assert len(leader_response.members) == 3
    assert follower_response.leader == leader_response.member_id
    assert follower_response.members == ()
    assert group.has_static_member("leader")


def test_static_members_are_persisted_with_their_instance_ids(ctx):
    ctx.static_members_join_and_rebalance()
    key, value = decode_record(ctx.log[-1])
    assert key == GroupMetadataKey("group-id")
    assert sorted(m.group_instance_id for m in value.members) == ["follower", "leader"]


def _stable_with_follower_not_synced(ctx):
    ctx.create_group()
    leader = ctx.join_group(
        group_instance_id="leader",
        protocols=SUPERSET,
        rebalance_timeout_ms=10000,
        session_timeout_ms=60000,
        version=5,
    )
    follower = ctx.join_group(
        group_instance_id="follower",
        protocols=SUPERSET,
        rebalance_timeout_ms=10000,
        session_timeout_ms=60000,
        version=5,
    )
    ctx.advance(DELAY)
    ctx.advance(DELAY)
    ctx.sync_group(
        member_id=leader.response.member_id,
        generation_id=1,
        group_instance_id="leader",
        assignments={follower.response.member_id: b"F"},
    )
    assert ctx.group().is_in_state(S.STABLE)
    assert ctx.group().pending_sync_members() == [follower.response.member_id]
    return leader.response, follower.response


def test_replaced_static_member_inherits_the_pending_sync(ctx):
    _, follower = _stable_with_follower_not_synced(ctx)
    rejoin = ctx.join_group(group_instance_id="follower", protocols=SUPERSET, version=9)
    new_id = rejoin.response.member_id
    assert ctx.group().pending_sync_members() == [new_id]
    sync = ctx.sync_group(member_id=new_id, generation_id=1, group_instance_id="follower")
    assert sync.response.assignment == b"F"
    assert ctx.sync_deadline() is None
    ctx.advance(10000)
    assert ctx.group().is_in_state(S.STABLE)


def test_replaced_static_member_that_never_syncs_is_removed_at_sync_expiry(ctx):
    leader, _ = _stable_with_follower_not_synced(ctx)
    rejoin = ctx.join_group(group_instance_id="follower", protocols=SUPERSET, version=9)
    ctx.advance(10000)
    group = ctx.group()
    assert not group.has_member(rejoin.response.member_id)
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert group.all_member_ids() == [leader.member_id]
