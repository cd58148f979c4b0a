"""LeaveGroup: single (v0-v2) and batch (v3+) leaves, admin removal of static members, pending members.

Scenarios are ported from Kafka's GroupMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import pytest

from coordinator.group import ClassicGroupState
from coordinator.records import GroupMetadataKey, GroupMetadataValue
from protocol.errors import ErrorCode

from .context import GroupTestContext, decoded, to_protocols

S = ClassicGroupState
DELAY = 3000


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


def members_of(call) -> list[tuple[str, str | None, ErrorCode]]:
    return [(m.member_id, m.group_instance_id, ErrorCode(m.error_code)) for m in call.response.members]


def test_leave_group_invalid_group_id(ctx):
    call = ctx.leave_group("", [("member-id", None)])
    assert call.error == ErrorCode.invalid_group_id


def test_leave_group_unknown_group(ctx):
    # testLeaveGroupUnknownGroup (Kafka's service maps the group-not-found to each member)
    call = ctx.leave_group("unknown-group-id", [("member-id", None)])
    assert call.error == ErrorCode.none
    assert members_of(call) == [("member-id", None, ErrorCode.unknown_member_id)]


def test_static_members_leave_unknown_group(ctx):
    # testStaticMembersLeaveUnknownGroup
    ctx.static_members_join_and_rebalance()
    call = ctx.leave_group("invalid-group-id", [("", "leader"), ("", "follower")])
    assert members_of(call) == [
        ("", "leader", ErrorCode.unknown_member_id),
        ("", "follower", ErrorCode.unknown_member_id),
    ]


def test_leave_group_unknown_member_id_existing_group(ctx):
    # testLeaveGroupUnknownMemberIdExistingGroup
    ctx.create_group()
    ctx.join_as_dynamic_member_and_complete_join()
    call = ctx.leave_group(members=[("unknown-member-id", None)])
    assert members_of(call) == [("unknown-member-id", None, ErrorCode.unknown_member_id)]
    assert not call.records


def test_valid_leave_group(ctx):
    # testValidLeaveGroup: the only member leaves during CompletingRebalance; the group becomes Empty
    ctx.create_group()
    joined = ctx.join_as_dynamic_member_and_complete_join()
    group = ctx.group()
    call = ctx.leave_group(members=[(joined.member_id, None)])
    assert decoded(call.records) == [
        (GroupMetadataKey("group-id"), GroupMetadataValue("consumer", 2, None, None, ctx.clock.wall_ms(), ()))
    ]
    assert members_of(call) == [(joined.member_id, None, ErrorCode.none)]
    assert group.is_in_state(S.EMPTY)
    assert group.generation_id == 2
    assert ctx.session_deadline(joined.member_id) is None


def test_leave_group_with_fenced_instance_id(ctx):
    # testLeaveGroupWithFencedInstanceId
    ctx.create_group()
    ctx.join_group(group_instance_id="group-instance-id", version=9)
    ctx.advance(DELAY)
    call = ctx.leave_group(members=[("other-member-id", "group-instance-id")])
    assert members_of(call) == [("other-member-id", "group-instance-id", ErrorCode.fenced_instance_id)]
    assert not call.records


def test_leave_group_static_member_with_unknown_member_id(ctx):
    # testLeaveGroupStaticMemberWithUnknownMemberId: admin removal by instance id
    ctx.create_group()
    ctx.join_group(group_instance_id="group-instance-id", version=9)
    ctx.advance(DELAY)
    call = ctx.leave_group(members=[("", "group-instance-id")])
    assert members_of(call) == [("", "group-instance-id", ErrorCode.none)]
    assert ctx.group().num_members() == 0


def test_static_members_valid_batch_leave_group(ctx):
    # testStaticMembersValidBatchLeaveGroup
    ctx.static_members_join_and_rebalance()
    call = ctx.leave_group(members=[("", "leader"), ("", "follower")])
    assert members_of(call) == [("", "leader", ErrorCode.none), ("", "follower", ErrorCode.none)]
    assert ctx.group().is_in_state(S.EMPTY)


def test_static_members_fenced_instance_batch_leave_group(ctx):
    # testStaticMembersFencedInstanceBatchLeaveGroup
    ctx.static_members_join_and_rebalance()
    call = ctx.leave_group(members=[("", "leader"), ("invalid-member-id", "follower")])
    assert members_of(call) == [
        ("", "leader", ErrorCode.none),
        ("invalid-member-id", "follower", ErrorCode.fenced_instance_id),
    ]


def test_static_members_unknown_instance_batch_leave_group(ctx):
    # testStaticMembersUnknownInstanceBatchLeaveGroup
    ctx.static_members_join_and_rebalance()
    call = ctx.leave_group(members=[("", "unknown-instance-id"), ("", "follower")])
    assert members_of(call) == [
        ("", "unknown-instance-id", ErrorCode.unknown_member_id),
        ("", "follower", ErrorCode.none),
    ]
    assert not call.records
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)


def test_pending_members_leave_group(ctx):
    # testPendingMembersLeaveGroup: the pending id was the last thing the join phase waited for
    pending = ctx.setup_group_with_pending_member()
    group = ctx.group()
    call = ctx.leave_group(members=[(pending.pending_member_id, None)])
    assert members_of(call) == [(pending.pending_member_id, None, ErrorCode.none)]
    assert not call.records
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert group.num_members() == 2
    assert len(group.all_dynamic_member_ids()) == 2
    assert group.num_pending_join_members() == 0
    assert pending.leader_join.done and pending.follower_join.done


def test_pending_member_batch_leave_group(ctx):
    # testPendingMemberBatchLeaveGroup
    pending = ctx.setup_group_with_pending_member()
    call = ctx.leave_group(members=[("", "unknown-instance-id"), (pending.pending_member_id, None)])
    assert members_of(call) == [
        ("", "unknown-instance-id", ErrorCode.unknown_member_id),
        (pending.pending_member_id, None, ErrorCode.none),
    ]


def test_joined_member_pending_member_batch_leave_group(ctx):
    # testJoinedMemberPendingMemberBatchLeaveGroup
    pending = ctx.setup_group_with_pending_member()
    call = ctx.leave_group(
        members=[(pending.leader_id, None), (pending.follower_id, None), (pending.pending_member_id, None)]
    )
    assert members_of(call) == [
        (pending.leader_id, None, ErrorCode.none),
        (pending.follower_id, None, ErrorCode.none),
        (pending.pending_member_id, None, ErrorCode.none),
    ]
    # the parked JoinGroups of the members that left are answered UNKNOWN_MEMBER_ID
    assert pending.leader_join.error == pending.follower_join.error == ErrorCode.unknown_member_id
    assert ctx.group().is_in_state(S.EMPTY)


def test_joined_member_pending_member_batch_leave_group_with_unknown_member(ctx):
    # testJoinedMemberPendingMemberBatchLeaveGroupWithUnknownMember
    pending = ctx.setup_group_with_pending_member()
    call = ctx.leave_group(
        members=[
            (pending.leader_id, None),
            (pending.follower_id, None),
            (pending.pending_member_id, None),
            ("unknown-member-id", None),
        ]
    )
    assert members_of(call) == [
        (pending.leader_id, None, ErrorCode.none),
        (pending.follower_id, None, ErrorCode.none),
        (pending.pending_member_id, None, ErrorCode.none),
        ("unknown-member-id", None, ErrorCode.unknown_member_id),
    ]


def test_group_stuck_in_rebalance_timeout_due_to_nonjoined_static_member(ctx):
    # testGroupStuckInRebalanceTimeoutDueToNonjoinedStaticMember
    result = ctx.static_members_join_and_rebalance(rebalance_timeout_ms=5000, session_timeout_ms=10000)
    group = ctx.group()
    new = ctx.join_group(
        protocols=to_protocols("range", "roundrobin"), session_timeout_ms=10000, rebalance_timeout_ms=500
    )
    ctx.advance(5000)
    assert new.error == ErrorCode.none
    assert new.response.leader == new.response.member_id  # the new dynamic member is elected leader
    assert len(new.response.members) == 3
    assert new.response.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert set(group.all_member_ids()) == {result.leader_id, result.follower_id, new.response.member_id}
    assert group.all_static_member_ids() == {result.leader_id, result.follower_id}
    assert group.all_dynamic_member_ids() == {new.response.member_id}

    leave = ctx.leave_group(members=[(result.follower_id, "follower")])
    assert members_of(leave) == [(result.follower_id, "follower", ErrorCode.none)]
    assert group.is_in_state(S.PREPARING_REBALANCE)

    ctx.advance(5000)
    # only the static leader remains; it does not rejoin, so the group waits in PreparingRebalance
    assert group.all_dynamic_member_ids() == set()
    assert group.all_member_ids() == [result.leader_id]
    assert group.generation_id == 2
    assert group.is_in_state(S.PREPARING_REBALANCE)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_v0_to_v2_leave_one_member_with_one_error(ctx, version):
    result = ctx.two_members_stable()
    ok = ctx.leave_group(members=[(result.follower_id, None)], version=version)
    assert ok.error == ErrorCode.none
    assert ok.response.members == ()
    unknown = ctx.leave_group(members=[("unknown-member-id", None)], version=version)
    assert unknown.error == ErrorCode.unknown_member_id
    assert unknown.response.members == ()
    missing_group = ctx.leave_group("other-group", [("member", None)], version=version)
    assert missing_group.error == ErrorCode.unknown_member_id


def test_leave_in_stable_rebalances_the_rest(ctx):
    result = ctx.two_members_stable()
    call = ctx.leave_group(members=[(result.follower_id, None)])
    assert not call.records
    group = ctx.group()
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert ctx.join_deadline() == 10000
    rejoin = ctx.join_group(
        member_id=result.leader_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert rejoin.response.generation_id == 2  # the barrier is complete with the only remaining member


def test_leave_in_completing_rebalance_fails_the_parked_syncs(ctx):
    result = ctx.two_members_stable()
    leader_join = ctx.join_group(
        member_id=result.leader_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    follower_join = ctx.join_group(
        member_id=result.follower_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert leader_join.done and follower_join.done
    follower_sync = ctx.sync_group(member_id=result.follower_id, generation_id=2)
    assert not follower_sync.done
    ctx.leave_group(members=[(result.leader_id, None)])
    assert follower_sync.error == ErrorCode.rebalance_in_progress
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)


def test_admin_removal_of_a_member_parked_in_sync_answers_it(ctx):
    """Kafka leaves a removed member's parked SyncGroup to its request timeout; answering it keeps the
    member's connection moving (answers are written in request order)."""
    result = ctx.static_members_join_and_rebalance()
    leader_join = ctx.join_group(
        member_id=result.leader_id,
        group_instance_id="leader",
        protocols=to_protocols("range", "roundrobin"),
        rebalance_timeout_ms=10000,
        session_timeout_ms=5000,
        version=5,
    )
    follower_join = ctx.join_group(
        member_id=result.follower_id,
        group_instance_id="follower",
        protocols=to_protocols("range", "roundrobin"),
        rebalance_timeout_ms=10000,
        session_timeout_ms=5000,
        version=5,
    )
    assert leader_join.done and follower_join.done
    follower_sync = ctx.sync_group(
        member_id=result.follower_id, generation_id=2, group_instance_id="follower"
    )
    ctx.leave_group(members=[("", "follower")])
    assert follower_sync.error == ErrorCode.unknown_member_id


def test_leave_of_a_failed_write_answers_the_error(ctx):
    ctx.create_group()
    joined = ctx.join_as_dynamic_member_and_complete_join()
    call = ctx.leave_group(members=[(joined.member_id, None)], apply=False)
    assert call.records
    ctx.fail(call.result, ErrorCode.not_coordinator)
    assert call.error == ErrorCode.not_coordinator
