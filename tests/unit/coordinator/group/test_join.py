"""JoinGroup: the join barrier, the initial delay, KIP-394, group.max.size, protocols, rebalance triggers.

Scenarios are ported from Kafka's GroupMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.clock import join_key, session_timeout_key
from coordinator.group import ClassicGroupState
from coordinator.records import GroupMetadataKey, GroupMetadataValue, new_empty_group_metadata_record
from protocol.errors import ErrorCode

from .context import GroupTestContext, decoded, subscription, to_protocols

S = ClassicGroupState
DELAY = 3000


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


def verify_join_responses(calls, expected_successes: int, expected_failure: ErrorCode) -> list[str]:
    """Kafka's verifyClassicGroupJoinResponses: every call answered, `expected_successes` without error, the
    rest with `expected_failure`; returns the member ids of the answers."""
    successes = 0
    member_ids = []
    for call in calls:
        assert call.done
        if call.error == ErrorCode.none:
            successes += 1
        else:
            assert call.error == expected_failure
        member_ids.append(call.response.member_id)
    assert successes == expected_successes
    return member_ids


# -- request validation --------------------------------------------------------------------------------------


def test_invalid_group_id(ctx):
    call = ctx.join_group("", "member")
    assert call.error == ErrorCode.invalid_group_id
    assert call.response.member_id == "member"
    assert not ctx.shard.groups and not call.records


@pytest.mark.parametrize("session_timeout_ms", [9, 10 * 60 * 1000 + 1])
def test_invalid_session_timeout(ctx, session_timeout_ms):
    call = ctx.join_group(session_timeout_ms=session_timeout_ms)
    assert call.error == ErrorCode.invalid_session_timeout
    assert not ctx.shard.groups


def test_session_timeout_bounds_use_kafka_defaults():
    ctx = GroupTestContext(group_min_session_timeout_ms=6000, group_max_session_timeout_ms=1800000)
    assert ctx.join_group(session_timeout_ms=5999).error == ErrorCode.invalid_session_timeout
    assert ctx.join_group(session_timeout_ms=1800001).error == ErrorCode.invalid_session_timeout
    assert not ctx.join_group(session_timeout_ms=6000).done  # accepted, waits for the initial delay


def test_join_group_unknown_member_new_group(ctx):
    # testJoinGroupUnknownMemberNewGroup
    call = ctx.join_group(member_id="member-id")
    assert call.error == ErrorCode.unknown_member_id
    assert not call.records
    call = ctx.join_group(member_id="member-id", group_instance_id="group-instance-id")
    assert call.error == ErrorCode.unknown_member_id
    assert "group-id" not in ctx.shard.groups


def test_join_group_protocol_type_is_not_provided_when_an_error_occurs():
    # testJoinGroupProtocolTypeIsNotProvidedWhenAnErrorOccurs
    ctx = GroupTestContext()
    call = ctx.join_group(member_id="member-id", version=9)
    assert call.error == ErrorCode.unknown_member_id
    assert call.response.protocol_type is None
    assert call.response.protocol_name is None


def test_error_answers_carry_an_empty_protocol_name_before_v7(ctx):
    for version in range(0, 7):
        assert ctx.join_group(member_id="member-id", version=version).response.protocol_name == ""
    for version in (7, 8, 9):
        assert ctx.join_group(member_id="member-id", version=version).response.protocol_name is None


def test_classic_group_join_inconsistent_protocol_type(ctx):
    # testClassicGroupJoinInconsistentProtocolType
    ctx.join_as_dynamic_member_and_complete_join()
    call = ctx.join_group(protocol_type="connect", protocols=to_protocols("range"))
    assert call.error == ErrorCode.inconsistent_group_protocol
    assert not call.records


def test_join_group_with_empty_protocol_type(ctx):
    # testJoinGroupWithEmptyProtocolType
    ctx.create_group()
    call = ctx.join_group(protocol_type="")
    assert call.error == ErrorCode.inconsistent_group_protocol
    call = ctx.join_group(protocol_type="", group_instance_id="group-instance-id", version=9)
    assert call.error == ErrorCode.inconsistent_group_protocol
    assert call.response.member_id == ""


def test_join_group_with_empty_group_protocol(ctx):
    # testJoinGroupWithEmptyGroupProtocol
    ctx.create_group()
    call = ctx.join_group(protocols=())
    assert call.error == ErrorCode.inconsistent_group_protocol


def test_join_group_inconsistent_group_protocol(ctx):
    # testJoinGroupInconsistentGroupProtocol
    ctx.create_group()
    first = ctx.join_group(protocols=to_protocols("range"))
    assert not first.records and not first.done
    other = ctx.join_group(protocols=to_protocols("roundrobin"))
    assert other.error == ErrorCode.inconsistent_group_protocol
    ctx.advance(DELAY)
    assert first.error == ErrorCode.none


def test_join_group_second_join_inconsistent_protocol(ctx):
    # testJoinGroupSecondJoinInconsistentProtocol
    ctx.create_group()
    first = ctx.join_group(version=4)
    assert first.error == ErrorCode.member_id_required
    member_id = first.response.member_id
    call = ctx.join_group(member_id=member_id, protocols=(), version=4)
    assert call.error == ErrorCode.inconsistent_group_protocol
    call = ctx.join_group(member_id=member_id, version=4)
    assert not call.records and not call.done
    ctx.advance(DELAY)
    assert call.error == ErrorCode.none


def test_join_group_returns_the_protocol_type(ctx):
    # testJoinGroupReturnsTheProtocolType
    ctx.create_group()
    leader = ctx.join_group()
    member = ctx.join_group()
    assert not leader.done and not member.done
    ctx.advance(DELAY)
    assert leader.error == member.error == ErrorCode.none
    assert leader.response.protocol_type == member.response.protocol_type == "consumer"


def test_member_id_generation(ctx):
    # testMemberIdGeneration: client id (or group instance id) + "-" + a UUID
    first = ctx.join_group(version=4, client_id="my-client")
    assert first.error == ErrorCode.member_id_required
    assert first.response.member_id == "my-client-uuid0"
    static = ctx.join_group(version=5, group_instance_id="instance")
    ctx.advance(DELAY)
    assert static.response.member_id == "instance-uuid1"


# -- new groups and records ----------------------------------------------------------------------------------


def test_generate_records_on_new_classic_group(ctx):
    # testGenerateRecordsOnNewClassicGroup
    call = ctx.join_group(version=4)
    assert call.error == ErrorCode.member_id_required
    group = ctx.group()
    assert call.records == [new_empty_group_metadata_record("group-id", group.current_state_timestamp_ms)]
    assert decoded(call.records) == [
        (GroupMetadataKey("group-id"), GroupMetadataValue("", 0, None, None, ctx.clock.wall_ms(), ()))
    ]


def test_generate_records_on_new_classic_group_failure_transforms_error():
    # testGenerateRecordsOnNewClassicGroupFailureTransformsError
    ctx = GroupTestContext()
    call = ctx.join_group(group_instance_id="group-instance-id", version=5, apply=False)
    assert not call.result.responses  # parked in the initial rebalance
    ctx.fail(call.result, ErrorCode.not_coordinator)
    assert call.error == ErrorCode.not_coordinator
    assert "group-id" not in ctx.shard.groups
    assert not ctx.timer.is_scheduled(join_key("group-id"))


def test_no_record_when_the_group_exists(ctx):
    ctx.create_group()
    assert not ctx.join_group(version=4).records


# -- the initial rebalance (KIP-134) -------------------------------------------------------------------------


def test_delay_initial_rebalance_by_group_initial_rebalance_delay_on_empty_group(ctx):
    # testDelayInitialRebalanceByGroupInitialRebalanceDelayOnEmptyGroup
    ctx.create_group()
    call = ctx.join_group()
    assert not call.records and not call.done
    assert ctx.join_deadline() == DELAY
    ctx.advance(DELAY // 2)
    assert not call.done
    ctx.advance(DELAY // 2 + 1)
    assert call.error == ErrorCode.none


def test_reset_rebalance_delay_when_new_member_joins_group_during_initial_rebalance(ctx):
    # testResetRebalanceDelayWhenNewMemberJoinsGroupDuringInitialRebalance
    ctx.create_group()
    first = ctx.join_group(rebalance_timeout_ms=DELAY * 3)
    assert not first.records and not first.done
    ctx.advance(DELAY - 1)
    second = ctx.join_group(rebalance_timeout_ms=DELAY * 3)
    assert not second.records and not second.done
    ctx.advance(2)
    # advance past the initial delay: not completed, the delay was extended
    ctx.advance(DELAY // 2 + 1)
    assert not first.done and not second.done
    # beyond the recomputed delay
    ctx.advance(DELAY // 2)
    assert first.error == second.error == ErrorCode.none


def test_delay_rebalance_upto_rebalance_timeout(ctx):
    # testDelayRebalanceUptoRebalanceTimeout
    ctx.create_group()
    first = ctx.join_group(rebalance_timeout_ms=DELAY * 2)
    second = ctx.join_group(rebalance_timeout_ms=DELAY * 2)
    assert not first.done and not second.done
    ctx.advance(DELAY + 1)
    third = ctx.join_group(rebalance_timeout_ms=DELAY * 2)
    assert not third.done
    ctx.advance(DELAY - 1)
    assert not first.done and not second.done and not third.done
    ctx.advance(1)
    assert first.error == second.error == third.error == ErrorCode.none


def test_initial_rebalance_never_completes_early(ctx):
    """All members in and no pending id, but the initial rebalance still waits for its delay."""
    ctx.create_group()
    first = ctx.join_group(version=3)
    assert ctx.group().has_all_members_joined()
    second = ctx.join_group(version=3)
    assert not first.done and not second.done
    ctx.advance(DELAY - 1)
    assert not first.done
    ctx.advance(1)  # the delay was extended by the second member, capped by rebalance timeout - delay = 0
    assert first.error == ErrorCode.none


def test_initial_rebalance_delay_of_zero_completes_on_the_next_timer_tick():
    ctx = GroupTestContext(group_initial_rebalance_delay_ms=0)
    call = ctx.join_group()
    assert not call.done
    ctx.advance(0)
    assert call.error == ErrorCode.none


# -- KIP-394 pending members ---------------------------------------------------------------------------------


def test_v4_dynamic_member_gets_member_id_required_and_a_pending_session(ctx):
    call = ctx.join_group(version=4, session_timeout_ms=2500)
    assert call.error == ErrorCode.member_id_required
    member_id = call.response.member_id
    group = ctx.group()
    assert group.is_pending_member(member_id)
    assert group.num_members() == 0
    assert ctx.session_deadline(member_id) == 2500


def test_v3_dynamic_member_is_added_at_once(ctx):
    call = ctx.join_group(version=3)
    assert not call.done
    assert ctx.group().num_members() == 1
    assert ctx.group().num_pending_join_members() == 0


def test_heartbeat_expiration_should_remove_pending_member(ctx):
    # testHeartbeatExpirationShouldRemovePendingMember
    ctx.create_group()
    call = ctx.join_group(version=4, session_timeout_ms=1000)
    member_id = call.response.member_id
    assert ctx.group().is_pending_member(member_id)
    ctx.advance(1000)
    assert not ctx.group().is_pending_member(member_id)


def test_join_group_completion_when_pending_member_joins(ctx):
    # testJoinGroupCompletionWhenPendingMemberJoins
    pending = ctx.setup_group_with_pending_member()
    group = ctx.group()
    call = ctx.join_group(member_id=pending.pending_member_id, version=4)
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert call.error == ErrorCode.none
    assert group.num_members() == 3
    assert group.num_pending_join_members() == 0


def test_join_group_completion_when_pending_member_times_out(ctx):
    # testJoinGroupCompletionWhenPendingMemberTimesOut
    pending = ctx.setup_group_with_pending_member()
    group = ctx.group()
    ctx.advance(2500)  # the pending member's session timeout
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert pending.leader_join.error == pending.follower_join.error == ErrorCode.none
    assert group.num_members() == 2
    assert group.num_pending_join_members() == 0


def test_pending_ids_count_in_the_join_barrier(ctx):
    pending = ctx.setup_group_with_pending_member()
    group = ctx.group()
    assert group.num_awaiting_join() == group.num_members() == 2
    assert not group.has_all_members_joined()
    assert not pending.leader_join.done


def test_join_group_existing_pending_member_with_group_instance_id_is_refused(ctx):
    # testJoinGroupExistingPendingMemberWithGroupInstanceIdThrowsException (Kafka throws)
    ctx.create_group()
    member_id = ctx.join_group(version=4).response.member_id
    call = ctx.join_group(member_id=member_id, group_instance_id="instance", version=5)
    assert call.error == ErrorCode.unknown_server_error


# -- group.max.size (KIP-389) --------------------------------------------------------------------------------


def test_join_group_should_receive_error_if_group_over_max_size():
    # testJoinGroupShouldReceiveErrorIfGroupOverMaxSize
    ctx = GroupTestContext(group_max_size=10)
    ctx.create_group()
    for _ in range(10):
        call = ctx.join_group(reason="exceed max group size")
        assert not call.done and not call.records
    call = ctx.join_group(reason="exceed max group size")
    assert not call.records
    assert call.error == ErrorCode.group_max_size_reached
    assert call.response.member_id == ""


def test_dynamic_members_join_group_with_max_size_and_required_known_member():
    # testDynamicMembersJoinGroupWithMaxSizeAndRequiredKnownMember
    ctx = GroupTestContext(group_max_size=10, group_initial_rebalance_delay_ms=50)
    ctx.create_group()
    group = ctx.group()
    first_round = [ctx.join_group(version=4) for _ in range(11)]
    assert group.num_members() == 0 and group.num_pending_join_members() == 11 and group.is_in_state(S.EMPTY)
    member_ids = verify_join_responses(first_round, 0, ErrorCode.member_id_required)
    second_round = [ctx.join_group(member_id=m, version=4) for m in member_ids]
    assert all(not c.records for c in second_round)
    assert group.num_members() == 10 and group.num_awaiting_join() == 10
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(50)
    ctx.advance(50)
    verify_join_responses(second_round, 10, ErrorCode.group_max_size_reached)
    assert group.num_members() == 10 and group.num_awaiting_join() == 0
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_dynamic_members_join_group_with_max_size_and_not_required_known_member():
    # testDynamicMembersJoinGroupWithMaxSizeAndNotRequiredKnownMember
    ctx = GroupTestContext(group_max_size=10, group_initial_rebalance_delay_ms=50)
    ctx.create_group()
    group = ctx.group()
    first_round = [ctx.join_group(version=3) for _ in range(11)]
    assert group.num_members() == 10 and group.num_awaiting_join() == 10
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(50)
    ctx.advance(50)
    member_ids = verify_join_responses(first_round, 10, ErrorCode.group_max_size_reached)
    second_round = [ctx.join_group(member_id=m, version=3) for m in member_ids]
    verify_join_responses(second_round, 10, ErrorCode.group_max_size_reached)
    assert group.num_members() == 10 and group.num_awaiting_join() == 0
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_static_members_join_group_with_max_size():
    # testStaticMembersJoinGroupWithMaxSize
    ctx = GroupTestContext(group_max_size=10, group_initial_rebalance_delay_ms=50)
    ctx.create_group()
    group = ctx.group()
    instance_ids = [f"instance-id-{i}" for i in range(11)]
    first_round = [ctx.join_group(group_instance_id=i) for i in instance_ids]
    assert group.num_members() == 10 and group.num_awaiting_join() == 10
    ctx.advance(50)
    ctx.advance(50)
    member_ids = verify_join_responses(first_round, 10, ErrorCode.group_max_size_reached)
    second_round = [
        ctx.join_group(member_id=m, group_instance_id=i)
        for m, i in zip(member_ids, instance_ids, strict=True)
    ]
    verify_join_responses(second_round, 10, ErrorCode.group_max_size_reached)
    assert group.num_members() == 10 and group.num_awaiting_join() == 0
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_dynamic_members_can_rejoin_group_with_max_size_while_rebalancing():
    # testDynamicMembersCanRejoinGroupWithMaxSizeWhileRebalancing
    ctx = GroupTestContext(group_max_size=10, group_initial_rebalance_delay_ms=50)
    ctx.create_group()
    group = ctx.group()
    first_round = [ctx.join_group(version=4) for _ in range(11)]
    member_ids = verify_join_responses(first_round, 0, ErrorCode.member_id_required)
    for member_id in member_ids:
        assert not ctx.join_group(member_id=member_id, version=4).records
    assert group.num_members() == 10 and group.num_awaiting_join() == 10
    # members can rejoin while rebalancing; their previous JoinGroup is answered as superseded
    third_round = [ctx.join_group(member_id=m, version=4) for m in member_ids]
    ctx.advance(50)
    ctx.advance(50)
    verify_join_responses(third_round, 10, ErrorCode.group_max_size_reached)
    assert group.num_members() == 10 and group.num_awaiting_join() == 0
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_last_joining_members_are_kicked_out_when_rejoining_group_with_max_size():
    # testLastJoiningMembersAreKickedOutWhenRejoiningGroupWithMaxSize: the group is over the limit (the
    # setting shrank); during the rebalance only members waiting in JoinGroup count, so the last two to rejoin
    # are out.
    ctx = GroupTestContext(group_max_size=12, group_initial_rebalance_delay_ms=50)
    ctx.create_group()
    group = ctx.group()
    first_round = [ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000) for _ in range(12)]
    ctx.advance(50)
    ctx.advance(50)
    member_ids = verify_join_responses(first_round, 12, ErrorCode.none)
    leader_id = group.leader_id
    ctx.sync_group(member_id=leader_id, generation_id=1)
    assert group.is_in_state(S.STABLE)

    ctx.shard.classic.settings = dataclasses.replace(ctx.shard.classic.settings, group_max_size=10)
    rejoins = [
        ctx.join_group(member_id=m, rebalance_timeout_ms=10000, session_timeout_ms=5000) for m in member_ids
    ]
    assert group.num_members() == 10 and group.num_awaiting_join() == 10
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(10000)
    verify_join_responses(rejoins, 10, ErrorCode.group_max_size_reached)
    assert group.num_members() == 10
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert all(not group.has_member(m) for m in member_ids[10:])
    assert all(group.has_member(m) for m in member_ids[:10])


def test_known_static_member_can_rejoin_a_full_group():
    """A known instance rejoining with an unknown member id replaces itself and does not grow the group, so
    group.max.size does not turn it away (Kafka fixed the same for consumer groups in KAFKA-20601)."""
    ctx = GroupTestContext(group_max_size=2)
    ctx.static_members_join_and_rebalance()
    assert ctx.join_group(version=5).error == ErrorCode.group_max_size_reached
    call = ctx.join_group(
        group_instance_id="follower", protocols=to_protocols("range", "roundrobin"), version=5
    )
    assert call.error == ErrorCode.none
    assert ctx.group().num_members() == 2


# -- join phase completion -----------------------------------------------------------------------------------


def test_join_group_existing_member_updated_metadata_triggers_rebalance(ctx):
    # testJoinGroupExistingMemberUpdatedMetadataTriggersRebalance
    ctx.create_group()
    response = ctx.join_as_dynamic_member_and_complete_join(protocols=to_protocols("range", "roundrobin"))
    group = ctx.group()
    assert group.generation_id == 1
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert group.protocol_name == "range"
    call = ctx.join_group(member_id=response.member_id, protocols=to_protocols("roundrobin"), version=5)
    assert call.error == ErrorCode.none
    assert call.response.generation_id == 2
    assert call.response.protocol_name == "roundrobin"
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_join_group_as_existing_leader_triggers_rebalance_in_stable_state(ctx):
    # testJoinGroupAsExistingLeaderTriggersRebalanceInStableState
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    group = ctx.group()
    call = ctx.join_group(member_id=leader.member_id, version=5)
    assert call.done  # the only member rejoined: the join phase completes at once
    assert call.response.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_join_group_from_unchanged_leader_should_rebalance(ctx):
    # testJoinGroupFromUnchangedLeaderShouldRebalance
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    call = ctx.join_group(
        member_id=leader.member_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert call.error == ErrorCode.none
    assert call.response.generation_id == leader.generation_id + 1
    assert ctx.group().is_in_state(S.COMPLETING_REBALANCE)


def test_join_group_as_existing_member_with_updated_metadata_triggers_rebalance_in_stable_state(ctx):
    # testJoinGroupAsExistingMemberWithUpdatedMetadataTriggersRebalanceInStableState
    result = ctx.two_members_stable()
    group = ctx.group()
    call = ctx.join_group(
        member_id=result.follower_id,
        protocols=to_protocols("roundrobin", "range"),
        rebalance_timeout_ms=10000,
        session_timeout_ms=5000,
        version=5,
    )
    assert not call.done
    assert group.is_in_state(S.PREPARING_REBALANCE)


def test_join_group_existing_member_does_not_trigger_rebalance_in_stable_state(ctx):
    # testJoinGroupExistingMemberDoesNotTriggerRebalanceInStableState
    result = ctx.two_members_stable()
    group = ctx.group()
    call = ctx.join_group(
        member_id=result.follower_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert call.error == ErrorCode.none
    assert group.is_in_state(S.STABLE)
    assert call.response.generation_id == 1
    assert call.response.leader == result.leader_id
    assert call.response.members == ()


def test_join_group_from_unchanged_follower_does_not_rebalance(ctx):
    # testJoinGroupFromUnchangedFollowerDoesNotRebalance
    test_join_group_existing_member_does_not_trigger_rebalance_in_stable_state(ctx)


def test_join_group_existing_member_in_completing_rebalance_gets_current_generation(ctx):
    """A member that lost its JoinGroup answer asks again with the same protocols: same generation."""
    ctx.create_group()
    leader = ctx.join_as_dynamic_member_and_complete_join(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    call = ctx.join_group(
        member_id=leader.member_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert call.error == ErrorCode.none
    assert call.response.generation_id == 1
    assert [m.member_id for m in call.response.members] == [leader.member_id]  # the leader gets the members
    assert ctx.group().is_in_state(S.COMPLETING_REBALANCE)


def test_join_group_existing_member_in_empty_state(ctx):
    # testJoinGroupExistingMemberInEmptyState
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    ctx.leave_group(members=[(leader.member_id, None)])
    assert ctx.group().is_in_state(S.EMPTY)
    call = ctx.join_group(member_id=leader.member_id, version=5)
    assert call.error == ErrorCode.unknown_member_id


def test_complete_join_remove_not_yet_rejoined_dynamic_members(ctx):
    # testCompleteJoinRemoveNotYetRejoinedDynamicMembers
    result = ctx.two_members_stable()
    group = ctx.group()
    leader_rejoin = ctx.join_group(
        member_id=result.leader_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert not leader_rejoin.done
    assert ctx.join_deadline() == 10000
    ctx.advance(10000)
    assert leader_rejoin.error == ErrorCode.none
    assert group.all_member_ids() == [result.leader_id]
    assert group.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert ctx.session_deadline(result.follower_id) is None


def test_complete_join_phase_in_empty_state_skips_rebalance(ctx):
    # testCompleteJoinPhaseInEmptyStateSkipsRebalance: everyone left during the rebalance -> Empty, record
    # written
    result = ctx.two_members_stable()
    group = ctx.group()
    leader_rejoin = ctx.join_group(
        member_id=result.leader_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=5
    )
    leave = ctx.leave_group(members=[(result.leader_id, None), (result.follower_id, None)])
    assert leader_rejoin.error == ErrorCode.unknown_member_id
    assert group.is_in_state(S.EMPTY)
    assert group.generation_id == 2
    assert decoded(leave.records) == [
        (GroupMetadataKey("group-id"), GroupMetadataValue("consumer", 2, None, None, ctx.clock.wall_ms(), ()))
    ]
    assert ctx.join_deadline() is None


def test_complete_join_phase_no_members_rejoined_extends_join_phase(ctx):
    # testCompleteJoinPhaseNoMembersRejoinedExtendsJoinPhase: static members that do not rejoin keep the group
    # waiting, a rebalance timeout at a time, until their sessions expire.
    ctx.create_group()
    first = ctx.join_group(
        group_instance_id="first", rebalance_timeout_ms=10000, session_timeout_ms=25000, version=5
    )
    second = ctx.join_group(
        group_instance_id="second", rebalance_timeout_ms=10000, session_timeout_ms=25000, version=5
    )
    ctx.advance(DELAY)
    ctx.advance(DELAY)
    assert first.error == second.error == ErrorCode.none
    group = ctx.group()
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    # a third (dynamic) member triggers a rebalance that none of the static members join
    third = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=25000, version=3)
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(10000)
    assert third.error == ErrorCode.none
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert group.num_members() == 3  # static members are never dropped at join completion
    # now nobody rejoins a new rebalance: the join phase is extended by another rebalance timeout
    ctx.leave_group(members=[(third.response.member_id, None)])
    assert group.is_in_state(S.PREPARING_REBALANCE)
    ctx.advance(10000)
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert ctx.join_deadline() == 10000
    # the static members' sessions expire: the group empties
    ctx.advance(25000)
    assert group.num_members() == 0
    assert group.is_in_state(S.EMPTY)


def test_new_member_join_expiration(ctx):
    # testNewMemberJoinExpiration
    ctx.create_group()
    new_member_join_timeout_ms = ctx.shard.settings.group_new_member_join_timeout_ms
    first = ctx.join_as_dynamic_member_and_complete_join(
        session_timeout_ms=5000 + new_member_join_timeout_ms,
        rebalance_timeout_ms=2 * new_member_join_timeout_ms,
    )
    group = ctx.group()
    assert first.leader == first.member_id
    assert not any(m.is_new for m in group.all_members())
    second = ctx.join_group(session_timeout_ms=5000, rebalance_timeout_ms=5000, version=3)
    assert not second.records and not second.done
    assert group.num_members() == 2
    new_member = next(m for m in group.all_members() if m.is_new)
    assert new_member.member_id != first.member_id
    assert ctx.session_deadline(new_member.member_id) == new_member_join_timeout_ms
    ctx.advance(new_member_join_timeout_ms)
    assert second.error == ErrorCode.unknown_member_id
    assert second.response.member_id == ""
    assert group.all_member_ids() == [first.member_id]


def test_new_member_timeout_completion(ctx):
    # testNewMemberTimeoutCompletion: the new member's join timeout ends the join phase it was holding up
    ctx.create_group()
    call = ctx.join_group(session_timeout_ms=1000, rebalance_timeout_ms=2000, version=3)
    ctx.advance(DELAY)
    assert call.error == ErrorCode.none
    group = ctx.group()
    member_id = call.response.member_id
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    # the new member heartbeats; once it syncs, its session is tracked normally
    assert ctx.heartbeat(member_id=member_id, generation_id=1).error == ErrorCode.none
    sync = ctx.sync_group(member_id=member_id, generation_id=1)
    assert sync.error == ErrorCode.none
    assert group.is_in_state(S.STABLE)
    assert ctx.session_deadline(member_id) == 1000
    ctx.advance(1000)
    assert group.num_members() == 0
    assert group.is_in_state(S.EMPTY)


def test_new_member_failure_after_join_group_completion(ctx):
    # testNewMemberFailureAfterJoinGroupCompletion: a member that never syncs is removed by its session
    # timeout
    ctx.create_group()
    call = ctx.join_group(session_timeout_ms=1000, rebalance_timeout_ms=5000, version=3)
    ctx.advance(DELAY)
    assert call.error == ErrorCode.none
    group = ctx.group()
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert not group.member(call.response.member_id).is_new
    ctx.advance(1000)
    assert group.num_members() == 0


def test_rebalance_completes_before_member_joins(ctx):
    # testRebalanceCompletesBeforeMemberJoins
    ctx.create_group()
    group = ctx.group()
    leader = ctx.join_group(
        group_instance_id="leader-instance-id", rebalance_timeout_ms=10000, session_timeout_ms=5000, version=9
    )
    ctx.advance(DELAY)
    first_member_id = leader.response.member_id
    assert leader.response.generation_id == 1
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert ctx.sync_group(member_id=first_member_id, generation_id=1).error == ErrorCode.none
    assert group.is_in_state(S.STABLE)

    # A new dynamic member triggers a rebalance; its join timeout is longer than the first member's session.
    second = ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=2500)
    assert not second.records and not second.done
    assert group.is_in_state(S.PREPARING_REBALANCE)

    # heartbeats keep the first member alive while the rebalance runs
    for _ in range(2):
        ctx.advance(2500)
        assert (
            ctx.heartbeat(member_id=first_member_id, generation_id=1).error == ErrorCode.rebalance_in_progress
        )

    # the join phase completes: the second member leads; the first, static, is not kicked out
    ctx.advance(8000)
    assert second.error == ErrorCode.none
    assert group.num_members() == 2
    assert group.generation_id == 2
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    other_member_id = second.response.member_id
    assert ctx.sync_group(member_id=other_member_id, generation_id=2).error == ErrorCode.none
    assert group.is_in_state(S.STABLE)

    # the unjoined static member is still there until its session times out
    assert ctx.heartbeat(member_id=first_member_id, generation_id=1).error == ErrorCode.illegal_generation
    for expected in (ErrorCode.none, ErrorCode.none, ErrorCode.rebalance_in_progress):
        ctx.advance(2000)
        assert ctx.heartbeat(member_id=other_member_id, generation_id=2).error == expected
    assert group.num_members() == 1
    assert group.is_in_state(S.PREPARING_REBALANCE)

    rejoin = ctx.join_group(member_id=other_member_id, rebalance_timeout_ms=10000, session_timeout_ms=2500)
    assert not rejoin.records
    assert rejoin.error == ErrorCode.none
    assert rejoin.response.generation_id == 3
    assert group.is_in_state(S.COMPLETING_REBALANCE)
    assert ctx.sync_group(member_id=other_member_id, generation_id=3).error == ErrorCode.none
    assert group.is_in_state(S.STABLE)

    # the remaining member keeps heartbeating; nothing rebalances
    for _ in range(20):
        ctx.advance(2000)
        assert ctx.heartbeat(member_id=other_member_id, generation_id=3).error == ErrorCode.none


def test_second_member_partially_join_and_timeout(ctx):
    # testSecondMemberPartiallyJoinAndTimeout: a KIP-394 member that takes its id and never comes back holds
    # the rebalance only until its pending session expires.
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    group = ctx.group()
    pending = ctx.join_group(version=4, session_timeout_ms=5000)
    assert pending.error == ErrorCode.member_id_required
    leader_rejoin = ctx.join_group(
        member_id=leader.member_id, rebalance_timeout_ms=10000, session_timeout_ms=5000, version=4
    )
    assert group.is_in_state(S.PREPARING_REBALANCE)
    assert not leader_rejoin.done
    ctx.advance(5000)
    assert leader_rejoin.error == ErrorCode.none
    assert leader_rejoin.response.generation_id == 2
    assert group.num_pending_join_members() == 0
    assert group.is_in_state(S.COMPLETING_REBALANCE)


def test_generation_id_increments_on_rebalance(ctx):
    # testGenerationIdIncrementsOnRebalance
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    call = ctx.join_group(member_id=leader.member_id)
    assert not call.records
    assert call.error == ErrorCode.none
    assert call.response.generation_id == 2


def test_heartbeat_expiration_should_remove_member(ctx):
    # testHeartbeatExpirationShouldRemoveMember
    ctx.create_group()
    call = ctx.join_group(session_timeout_ms=500, version=3)
    ctx.advance(DELAY)
    member_id = call.response.member_id
    group = ctx.group()
    assert group.has_member(member_id)
    ctx.advance(500)
    assert not group.has_member(member_id)


def test_leader_answer_lists_members_with_the_selected_protocol_metadata(ctx):
    ctx.create_group()
    a = ctx.join_group(
        protocols=(("range", subscription("a")), ("roundrobin", subscription("x"))),
        group_instance_id="a",
        version=5,
    )
    b = ctx.join_group(protocols=(("roundrobin", subscription("b")), ("range", subscription("y"))), version=3)
    c = ctx.join_group(protocols=(("roundrobin", subscription("c")),), version=3)
    ctx.advance(DELAY)
    ctx.advance(DELAY)
    # roundrobin: two votes of three; the leader (first member) gets everyone's roundrobin metadata
    assert a.response.protocol_name == "roundrobin"
    assert a.response.leader == a.response.member_id
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in a.response.members] == [
        (a.response.member_id, "a", subscription("x")),
        (b.response.member_id, None, subscription("b")),
        (c.response.member_id, None, subscription("c")),
    ]
    assert b.response.members == c.response.members == ()
    assert b.response.leader == c.response.leader == a.response.member_id


# -- versions ------------------------------------------------------------------------------------------------


def test_v0_uses_the_session_timeout_as_rebalance_timeout(ctx):
    call = ctx.join_group(version=0, session_timeout_ms=7000, rebalance_timeout_ms=1)
    assert ctx.group().member(ctx.group().all_member_ids()[0]).rebalance_timeout_ms == 7000
    ctx.advance(DELAY)
    assert call.error == ErrorCode.none
    assert call.response.protocol_name == "range"


def test_rebalance_timeout_of_minus_one_means_the_session_timeout(ctx):
    ctx.join_group(version=1, session_timeout_ms=7000, rebalance_timeout_ms=-1)
    assert ctx.group().member(ctx.group().all_member_ids()[0]).rebalance_timeout_ms == 7000


def test_group_rebalance_timeout_is_the_largest_of_the_members(ctx):
    ctx.create_group()
    ctx.join_group(rebalance_timeout_ms=1000)
    ctx.join_group(rebalance_timeout_ms=9000)
    ctx.join_group(rebalance_timeout_ms=4000)
    assert ctx.group().rebalance_timeout_ms() == 9000


def test_reason_is_accepted_from_v8(ctx):
    response = ctx.join_as_dynamic_member_and_complete_join(version=8, reason="rebalance because of a test")
    assert response.error_code == ErrorCode.none


def test_member_keys_use_session_timeout_key(ctx):
    call = ctx.join_group(version=4)
    assert ctx.timer.is_scheduled(session_timeout_key("group-id", call.response.member_id))
