"""SyncGroup: the leader's assignment, parked followers, protocol checks, sync expiry, append failure.

Scenarios are ported from Kafka's GroupMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import pytest

from coordinator.group import ClassicGroupState
from coordinator.records import GroupMetadataKey, decode_record, group_metadata_value
from protocol.errors import ErrorCode

from .context import GroupTestContext, to_protocols

S = ClassicGroupState
DELAY = 3000


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


def _two_static_members_completing(ctx: GroupTestContext):
    """Two static members (protocols range+roundrobin) in CompletingRebalance, generation 1."""
    ctx.create_group()
    leader = ctx.join_group(
        group_instance_id="leader-instance-id", protocols=to_protocols("range", "roundrobin"), version=5
    )
    follower = ctx.join_group(
        group_instance_id="follower-instance-id", protocols=to_protocols("range", "roundrobin"), version=5
    )
    ctx.advance(10000)
    assert leader.error == follower.error == ErrorCode.none
    return leader.response, follower.response


@pytest.mark.parametrize(
    "protocol_type, protocol_name, version, expected_error, expected_type, expected_name",
    [
        # testSyncGroupReturnsAnErrorWhenProtocolTypeIsInconsistent
        ("protocol_type", "range", 5, ErrorCode.inconsistent_group_protocol, None, None),
        # testSyncGroupReturnsAnErrorWhenProtocolNameIsInconsistent
        ("consumer", "protocol_name", 5, ErrorCode.inconsistent_group_protocol, None, None),
        # testSyncGroupSucceedWhenProtocolTypeAndNameAreNotProvided (only possible before v5)
        (None, None, 4, ErrorCode.none, "consumer", "range"),
        # testSyncGroupSucceedWhenProtocolTypeAndNameAreConsistent
        ("consumer", "range", 5, ErrorCode.none, "consumer", "range"),
    ],
)
def test_sync_group_protocol_type_and_name(
    ctx, protocol_type, protocol_name, version, expected_error, expected_type, expected_name
):
    leader, follower = _two_static_members_completing(ctx)
    leader_sync = ctx.sync_group(
        member_id=leader.member_id,
        generation_id=leader.generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        version=version,
        assignments={leader.member_id: b""},
    )
    assert leader_sync.error == expected_error
    assert leader_sync.response.protocol_type == expected_type
    assert leader_sync.response.protocol_name == expected_name
    follower_sync = ctx.sync_group(
        member_id=follower.member_id,
        generation_id=follower.generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        version=version,
    )
    assert not follower_sync.records
    assert follower_sync.error == expected_error
    assert follower_sync.response.protocol_type == expected_type
    assert follower_sync.response.protocol_name == expected_name


@pytest.mark.parametrize("protocol_type, protocol_name", [(None, "range"), ("consumer", None), (None, None)])
def test_v5_requires_protocol_type_and_name(ctx, protocol_type, protocol_name):
    leader, _ = _two_static_members_completing(ctx)
    call = ctx.sync_group(
        member_id=leader.member_id,
        generation_id=1,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        version=5,
    )
    assert call.error == ErrorCode.inconsistent_group_protocol
    assert ctx.group().is_in_state(S.COMPLETING_REBALANCE)


def test_sync_group_invalid_group_id(ctx):
    assert ctx.sync_group("", "member", 1).error == ErrorCode.invalid_group_id


def test_sync_group_from_unknown_group(ctx):
    # testSyncGroupFromUnknownGroup
    call = ctx.sync_group(member_id="member-id", generation_id=1)
    assert not call.records
    assert call.error == ErrorCode.unknown_member_id


def test_sync_group_from_empty_group(ctx):
    ctx.create_group()
    assert ctx.sync_group(member_id="member-id", generation_id=0).error == ErrorCode.unknown_member_id


def test_sync_group_from_unknown_member(ctx):
    # testSyncGroupFromUnknownMember
    ctx.create_group()
    response = ctx.join_as_dynamic_member_and_complete_join()
    member_id, generation_id = response.member_id, response.generation_id
    sync = ctx.sync_group(member_id=member_id, generation_id=generation_id)
    assert sync.error == ErrorCode.none
    assert ctx.group().is_in_state(S.STABLE)
    call = ctx.sync_group(member_id="unknown-member-id", generation_id=generation_id)
    assert not call.records
    assert call.error == ErrorCode.unknown_member_id


def test_sync_group_from_illegal_generation(ctx):
    # testSyncGroupFromIllegalGeneration
    ctx.create_group()
    call = ctx.join_group(group_instance_id="leader-instance-id", version=9)
    ctx.advance(DELAY)
    response = call.response
    sync = ctx.sync_group(member_id=response.member_id, generation_id=response.generation_id + 1)
    assert not sync.records
    assert sync.error == ErrorCode.illegal_generation


def test_sync_group_during_preparing_rebalance_is_rebalance_in_progress(ctx):
    result = ctx.two_members_stable()
    ctx.join_group(member_id=result.leader_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5)
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)
    call = ctx.sync_group(member_id=result.follower_id, generation_id=1)
    assert call.error == ErrorCode.rebalance_in_progress


def test_sync_group_as_leader_writes_the_assignment_and_answers_after_it(ctx):
    leader, follower = _two_static_members_completing(ctx)
    follower_sync = ctx.sync_group(member_id=follower.member_id, generation_id=1)
    assert not follower_sync.done and not follower_sync.records
    leader_sync = ctx.sync_group(
        member_id=leader.member_id,
        generation_id=1,
        assignments={leader.member_id: b"L", follower.member_id: b"F"},
        apply=False,
    )
    # the record carries the new assignment; both parked answers are released with it
    group = ctx.group()
    assert [decode_record(r) for r in leader_sync.records] == [
        (
            GroupMetadataKey("group-id"),
            group_metadata_value(group, {leader.member_id: b"L", follower.member_id: b"F"}),
        )
    ]
    assert {t for t, _ in leader_sync.result.responses} == {leader_sync.token, follower_sync.token}
    ctx.apply(leader_sync.result)
    assert leader_sync.response.assignment == b"L"
    assert follower_sync.response.assignment == b"F"
    assert follower_sync.response.protocol_type == "consumer"
    assert follower_sync.response.protocol_name == "range"
    assert group.is_in_state(S.STABLE)
    assert ctx.sync_deadline() is None  # everyone synced


def test_sync_group_follower_after_leader(ctx):
    # testSyncGroupFollowerAfterLeader
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    follower_join = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    assert not follower_join.done
    leader_join = ctx.join_group(
        member_id=leader.member_id, rebalance_timeout_ms=10000, session_timeout_ms=5000
    )
    assert leader_join.done and follower_join.done
    assert leader_join.response.generation_id == follower_join.response.generation_id
    assert leader_join.response.leader == follower_join.response.leader == leader.member_id
    group = ctx.group()
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    generation_id = leader_join.response.generation_id
    follower_id = follower_join.response.member_id
    sync = ctx.sync_group(
        member_id=leader.member_id,
        generation_id=generation_id,
        assignments={leader.member_id: b"\x00", follower_id: b"\x01"},
    )
    assert sync.error == ErrorCode.none
    assert sync.response.assignment == b"\x00"
    follower_sync = ctx.sync_group(member_id=follower_id, generation_id=generation_id)
    assert not follower_sync.records
    assert follower_sync.error == ErrorCode.none
    assert follower_sync.response.assignment == b"\x01"
    assert group.is_in_state(S.STABLE)


def test_sync_group_leader_after_follower(ctx):
    # testSyncGroupLeaderAfterFollower
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    follower_join = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    leader_join = ctx.join_group(
        member_id=leader.member_id, rebalance_timeout_ms=10000, session_timeout_ms=5000
    )
    generation_id = leader_join.response.generation_id
    follower_id = follower_join.response.member_id
    group = ctx.group()
    follower_sync = ctx.sync_group(member_id=follower_id, generation_id=generation_id)
    assert not follower_sync.records and not follower_sync.done
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    leader_sync = ctx.sync_group(
        member_id=leader.member_id,
        generation_id=generation_id,
        assignments={leader.member_id: b"\x00", follower_id: b"\x01"},
    )
    assert leader_sync.response.assignment == b"\x00"
    assert follower_sync.error == ErrorCode.none
    assert follower_sync.response.assignment == b"\x01"
    assert group.is_in_state(S.STABLE)


def test_sync_group_empty_assignment_for_members_the_leader_omitted(ctx):
    leader, follower = _two_static_members_completing(ctx)
    follower_sync = ctx.sync_group(member_id=follower.member_id, generation_id=1)
    ctx.sync_group(
        member_id=leader.member_id, generation_id=1, assignments={leader.member_id: b"only-leader"}
    )
    assert follower_sync.error == ErrorCode.none
    assert follower_sync.response.assignment == b""
    assert ctx.group().member(follower.member_id).assignment == b""


def test_sync_group_empty_assignment(ctx):
    # testSyncGroupEmptyAssignment
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    assert (
        ctx.heartbeat(member_id=leader.member_id, generation_id=leader.generation_id).error == ErrorCode.none
    )


def test_sync_in_stable_returns_the_stored_assignment(ctx):
    result = ctx.two_members_stable()
    call = ctx.sync_group(member_id=result.follower_id, generation_id=1)
    assert not call.records
    assert call.response.assignment == b"\x02"


def test_superseded_parked_sync_is_answered(ctx):
    leader, follower = _two_static_members_completing(ctx)
    first = ctx.sync_group(member_id=follower.member_id, generation_id=1)
    second = ctx.sync_group(member_id=follower.member_id, generation_id=1)
    assert first.error == ErrorCode.rebalance_in_progress
    assert not second.done
    ctx.sync_group(member_id=leader.member_id, generation_id=1, assignments={follower.member_id: b"F"})
    assert second.response.assignment == b"F"


def test_sync_group_as_leader_append_failure_transforms_error(ctx):
    # testSyncGroupAsLeaderAppendFailureTransformsError
    ctx.create_group()
    join = ctx.join_group(group_instance_id="leader-instance-id", version=9)
    ctx.advance(DELAY)
    sync = ctx.sync_group(member_id=join.response.member_id, generation_id=1, apply=False)
    assert sync.result.on_append_failure is not None
    ctx.fail(sync.result, ErrorCode.not_coordinator)
    assert sync.error == ErrorCode.not_coordinator


def test_failed_assignment_write_answers_every_parked_sync_and_rebalances(ctx):
    leader, follower = _two_static_members_completing(ctx)
    follower_sync = ctx.sync_group(member_id=follower.member_id, generation_id=1)
    leader_sync = ctx.sync_group(
        member_id=leader.member_id,
        generation_id=1,
        assignments={leader.member_id: b"L", follower.member_id: b"F"},
        apply=False,
    )
    ctx.fail(leader_sync.result, ErrorCode.coordinator_not_available)
    assert leader_sync.error == follower_sync.error == ErrorCode.coordinator_not_available
    assert leader_sync.response.assignment == b""
    group = ctx.group()
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert all(m.assignment == b"" for m in group.all_members())


def test_leader_failure_in_sync_group(ctx):
    # testLeaderFailureInSyncGroup
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    group = ctx.group()
    follower_join = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    leader_join = ctx.join_group(
        member_id=leader.member_id, rebalance_timeout_ms=10000, session_timeout_ms=5000
    )
    assert leader_join.response.leader == follower_join.response.leader == leader.member_id
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    generation_id = leader_join.response.generation_id
    follower_id = follower_join.response.member_id
    follower_sync = ctx.sync_group(member_id=follower_id, generation_id=generation_id)
    assert not follower_sync.records and not follower_sync.done
    # the leader's session expires: the follower's parked sync learns to rejoin; the follower itself stays
    # (its session timer is satisfied while it waits in SyncGroup)
    results = ctx.advance(10000)
    assert len(results) <= 2
    assert all(not r.records for r in results)
    assert follower_sync.error == ErrorCode.rebalance_in_progress
    assert group.all_member_ids() == [follower_id]
    assert group.is_in_state(S.PREPARING_REBALANCE)


def test_rebalance_times_out_when_sync_request_is_not_received(ctx):
    # testRebalanceTimesOutWhenSyncRequestIsNotReceived
    responses = ctx.join_with_n_members(3, 5000, 5000)
    group = ctx.group()
    ctx.advance(2500)
    for response in responses:
        ctx.verify_heartbeat(response, ErrorCode.none)
    results = ctx.advance(2500)
    assert len(results) == 1
    # all members were removed: the group is Empty and its metadata is written
    assert [decode_record(r) for r in results[0].records] == [
        (GroupMetadataKey("group-id"), group_metadata_value(group, {}))
    ]
    for response in responses:
        ctx.verify_heartbeat(response, ErrorCode.unknown_member_id)
    assert group.is_in_state(S.EMPTY)


def test_rebalance_times_out_when_sync_request_is_not_received_from_followers(ctx):
    # testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromFollowers
    responses = ctx.join_with_n_members(3, 5000, 5000)
    group = ctx.group()
    ctx.advance(2500)
    for response in responses:
        ctx.verify_heartbeat(response, ErrorCode.none)
    sync = ctx.sync_group(member_id=responses[0].member_id, generation_id=1)
    assert sync.error == ErrorCode.none
    assert group.is_in_state(S.STABLE)
    ctx.verify_heartbeat(responses[0], ErrorCode.none)
    results = ctx.advance(2500)
    assert len(results) == 1 and not results[0].records
    ctx.verify_heartbeat(responses[0], ErrorCode.rebalance_in_progress)
    for response in responses[1:]:
        ctx.verify_heartbeat(response, ErrorCode.unknown_member_id)
    assert group.is_in_state(S.PREPARING_REBALANCE)


def test_rebalance_times_out_when_sync_request_is_not_received_from_leaders(ctx):
    # testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromLeaders
    responses = ctx.join_with_n_members(3, 5000, 5000)
    group = ctx.group()
    ctx.advance(2500)
    for response in responses:
        ctx.verify_heartbeat(response, ErrorCode.none)
    follower_syncs = [ctx.sync_group(member_id=r.member_id, generation_id=1) for r in responses[1:]]
    assert all(not s.records and not s.done for s in follower_syncs)
    results = ctx.advance(2500)
    assert len(results) == 1 and not results[0].records
    assert all(s.error == ErrorCode.rebalance_in_progress for s in follower_syncs)
    ctx.verify_heartbeat(responses[0], ErrorCode.unknown_member_id)
    for response in responses[1:]:
        ctx.verify_heartbeat(response, ErrorCode.rebalance_in_progress)
    assert group.is_in_state(S.PREPARING_REBALANCE)


def test_rebalance_does_not_time_out_when_all_sync_are_received(ctx):
    # testRebalanceDoesNotTimeOutWhenAllSyncAreReceived
    responses = ctx.join_with_n_members(3, 5000, 5000)
    group = ctx.group()
    leader_id = responses[0].member_id
    ctx.advance(2500)
    for response in responses:
        ctx.verify_heartbeat(response, ErrorCode.none)
    syncs = []
    for response in responses:
        # the record describes the group as the leader's SyncGroup finds it (CompletingRebalance)
        expected = group_metadata_value(group, {r.member_id: b"" for r in responses})
        sync = ctx.sync_group(member_id=response.member_id, generation_id=1)
        if response.member_id == leader_id:
            assert [decode_record(r) for r in sync.records] == [(GroupMetadataKey("group-id"), expected)]
        else:
            assert not sync.records
        syncs.append(sync)
    assert all(s.error == ErrorCode.none for s in syncs)
    assert ctx.sync_deadline() is None
    for _ in range(2):
        ctx.advance(2500)
        for response in responses:
            ctx.verify_heartbeat(response, ErrorCode.none)
    assert group.is_in_state(S.STABLE)


def test_sync_expiry_is_scheduled_for_the_rebalance_timeout(ctx):
    ctx.join_with_n_members(2, 7000, 5000)
    assert ctx.sync_deadline() == 7000


def test_large_assignment_is_accepted(ctx):
    """A 624 KB assignment (librdkafka#3866) goes through like any other."""
    leader, follower = _two_static_members_completing(ctx)
    big = bytes(range(256)) * 2500
    ctx.sync_group(member_id=leader.member_id, generation_id=1, assignments={follower.member_id: big})
    assert ctx.sync_group(member_id=follower.member_id, generation_id=1).response.assignment == big
