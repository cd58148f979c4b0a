"""Heartbeat and session timeouts: per-state answers, and which members the session timer spares.

Scenarios are ported from Kafka's GroupMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import pytest

from coordinator.clock import session_timeout_key
from coordinator.group import ClassicGroupMember, ClassicGroupState
from protocol.errors import ErrorCode

from .context import GroupTestContext, to_protocols

S = ClassicGroupState
DELAY = 3000


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


def test_heartbeat_invalid_group_id(ctx):
    assert ctx.heartbeat("", "member", 1).error == ErrorCode.invalid_group_id


def test_heartbeat_unknown_group(ctx):
    # testHeartbeatUnknownGroup
    assert ctx.heartbeat(member_id="member-id", generation_id=-1).error == ErrorCode.unknown_member_id


def test_heartbeat_empty_group(ctx):
    # testHeartbeatEmptyGroup
    group = ctx.create_group()
    group.add(
        ClassicGroupMember(
            "member-id", None, "client-id", "client-host", 10000, 5000, "consumer", to_protocols("range")
        )
    )
    assert ctx.heartbeat(member_id="member-id", generation_id=0).error == ErrorCode.unknown_member_id


def test_heartbeat_unknown_member_existing_group(ctx):
    # testHeartbeatUnknownMemberExistingGroup
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    assert (
        ctx.heartbeat(member_id="unknown-member-id", generation_id=leader.generation_id).error
        == ErrorCode.unknown_member_id
    )


def test_heartbeat_of_a_pending_member_is_unknown_member_id(ctx):
    pending = ctx.join_group(version=4).response.member_id
    assert ctx.heartbeat(member_id=pending, generation_id=0).error == ErrorCode.unknown_member_id


def test_heartbeat_during_preparing_rebalance(ctx):
    # testHeartbeatDuringPreparingRebalance
    ctx.create_group()
    first = ctx.join_group(version=4)
    assert first.error == ErrorCode.member_id_required
    member_id = first.response.member_id
    ctx.join_group(member_id=member_id, version=4)
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)
    assert ctx.heartbeat(member_id=member_id, generation_id=0).error == ErrorCode.rebalance_in_progress


def test_heartbeat_during_preparing_rebalance_refreshes_the_session(ctx):
    """REBALANCE_IN_PROGRESS, yet the member's session timer restarts (behaviour 3 and 8)."""
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)  # a new member: rebalance
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(4000)
    assert ctx.session_deadline(leader.member_id) == 1000
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.rebalance_in_progress
    assert ctx.session_deadline(leader.member_id) == 5000


def test_heartbeat_during_completing_rebalance(ctx):
    # testHeartbeatDuringCompletingRebalance
    ctx.create_group()
    leader = ctx.join_as_dynamic_member_and_complete_join()
    assert leader.generation_id == 1
    assert ctx.group().is_in_state(S.COMPLETING_REBALANCE)
    call = ctx.heartbeat(member_id=leader.member_id, generation_id=1)
    assert call.error == ErrorCode.none
    assert not call.result.records


def test_heartbeat_illegal_generation(ctx):
    # testHeartbeatIllegalGeneration
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    assert (
        ctx.heartbeat(member_id=leader.member_id, generation_id=leader.generation_id + 1).error
        == ErrorCode.illegal_generation
    )


def test_valid_heartbeat(ctx):
    # testValidHeartbeat
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    assert (
        ctx.heartbeat(member_id=leader.member_id, generation_id=leader.generation_id).error == ErrorCode.none
    )


def test_static_member_heartbeat_leader_with_invalid_member_id(ctx):
    # testStaticMemberHeartbeatLeaderWithInvalidMemberId
    result = ctx.static_members_join_and_rebalance()
    sync = ctx.sync_group(member_id=result.leader_id, generation_id=1, group_instance_id="leader")
    assert not sync.records and sync.error == ErrorCode.none
    assert ctx.heartbeat(member_id=result.leader_id, generation_id=1).error == ErrorCode.none
    assert (
        ctx.heartbeat(member_id="invalid-member-id", generation_id=1, group_instance_id="leader").error
        == ErrorCode.fenced_instance_id
    )
    assert (
        ctx.heartbeat(member_id=result.leader_id, generation_id=1, group_instance_id="unknown-instance").error
        == ErrorCode.unknown_member_id
    )


def test_heartbeat_during_rebalance_causes_rebalance_in_progress(ctx):
    # testHeartbeatDuringRebalanceCausesRebalanceInProgress
    ctx.create_group()
    leader = ctx.join_as_dynamic_member_and_complete_join(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    assert ctx.group().is_in_state(S.COMPLETING_REBALANCE)
    join = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    assert not join.records and not join.done
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.rebalance_in_progress


# -- session timeouts ----------------------------------------------------------------------------------------


def test_classic_group_member_session_timeout(ctx):
    # testClassicGroupMemberSessionTimeout
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    assert ctx.session_deadline(leader.member_id) == 5000
    results = ctx.advance(5000)
    assert len(results) == 1
    assert not ctx.timer.is_scheduled(session_timeout_key("group-id", leader.member_id))
    assert ctx.group().num_members() == 0
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.unknown_member_id


def test_classic_group_member_heartbeat_maintains_session(ctx):
    # testClassicGroupMemberHeartbeatMaintainsSession
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    ctx.advance(2500)
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.none
    ctx.advance(2500)
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.none


def test_classic_group_member_session_timeout_during_rebalance(ctx):
    # testClassicGroupMemberSessionTimeoutDuringRebalance
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    group = ctx.group()
    other = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    assert not other.records and not other.done
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(2500)
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.rebalance_in_progress
    ctx.advance(5000)
    assert ctx.heartbeat(member_id=leader.member_id, generation_id=1).error == ErrorCode.unknown_member_id
    ctx.advance(2500)
    assert other.error == ErrorCode.none
    assert group.num_members() == 1
    assert group.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_members_awaiting_join_are_alive_until_the_join_completes(ctx):
    """A rejoined (not new) member parked in JoinGroup survives its session timer; the timer restarts when the
    join completes."""
    result = ctx.two_members_stable()
    group = ctx.group()
    follower_rejoin = ctx.join_group(
        member_id=result.follower_id,
        protocols=to_protocols("range", "roundrobin"),
        rebalance_timeout_ms=10000,
        session_timeout_ms=5000,
        version=5,
    )
    assert not follower_rejoin.done
    ctx.advance(4000)
    assert ctx.heartbeat(member_id=result.leader_id, generation_id=1).error == ErrorCode.rebalance_in_progress
    ctx.advance(1000)  # the follower's session timer fires while it waits: ignored, and not re-armed
    assert group.has_member(result.follower_id)
    assert ctx.session_deadline(result.follower_id) is None
    ctx.advance(5000)  # the leader, not rejoined, expires; the join phase completes without it
    assert follower_rejoin.error == ErrorCode.none
    assert group.all_member_ids() == [result.follower_id]
    assert ctx.session_deadline(result.follower_id) == 5000


def test_members_awaiting_sync_are_alive_until_the_assignment_arrives(ctx):
    result = ctx.static_members_join_and_rebalance(session_timeout_ms=5000)
    group = ctx.group()
    # the leader rejoins: a new generation with both members
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
    assert not follower_sync.done
    ctx.advance(
        5000
    )  # both sessions fire: the leader (not waiting) is removed, the follower (waiting) is not
    assert group.all_member_ids() == [result.follower_id]
    assert follower_sync.error == ErrorCode.rebalance_in_progress


def test_commit_refreshes_the_session(ctx):
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    ctx.advance(4000)
    call = ctx.commit(member_id=leader.member_id, generation_id=1)
    assert call.response.topics[0].partitions[0].error_code == ErrorCode.none
    assert ctx.session_deadline(leader.member_id) == 5000


def test_session_expiry_in_stable_rebalances_the_rest(ctx):
    result = ctx.two_members_stable()
    group = ctx.group()
    ctx.advance(4000)
    assert ctx.heartbeat(member_id=result.leader_id, generation_id=1).error == ErrorCode.none
    ctx.advance(1000)  # the follower expires
    assert group.all_member_ids() == [result.leader_id]
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert ctx.heartbeat(member_id=result.leader_id, generation_id=1).error == ErrorCode.rebalance_in_progress
    rejoin = ctx.join_group(
        member_id=result.leader_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert rejoin.response.generation_id == 2
