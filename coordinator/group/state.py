"""The states of a classic group and the transitions between them (Kafka's ClassicGroupState)."""

from __future__ import annotations

import enum


class IllegalStateTransition(RuntimeError):
    """A transition the state table forbids. Raised before anything changes."""


class ClassicGroupState(enum.Enum):
    """The state of a classic group. The value is Kafka's name, as DescribeGroups and ListGroups report it."""

    EMPTY = "Empty"
    """No members, but the group lingers until its offsets expire; also the state of a "simple" group that
    only commits offsets (generation -1, no protocol type).

    action: JoinGroup from a new member -> accepted (a dynamic v4+ member gets MEMBER_ID_REQUIRED first)
            JoinGroup from a known member id -> UNKNOWN_MEMBER_ID
            SyncGroup, Heartbeat, LeaveGroup -> UNKNOWN_MEMBER_ID
            OffsetCommit -> accepted with generation -1 and no member (simple/admin commit);
                            otherwise UNKNOWN_MEMBER_ID
            OffsetFetch, OffsetDelete, DeleteGroups -> allowed
    transition: JoinGroup from a new member -> PREPARING_REBALANCE (with the initial delay, KIP-134)
                deleted (DeleteGroups, or all offsets expired) -> DEAD
    """

    PREPARING_REBALANCE = "PreparingRebalance"
    """Waiting for members to (re)join before the next generation.

    action: JoinGroup -> parked until every known member has rejoined and no pending member id is
                         outstanding, or the rebalance timeout (the largest of the members') expires
            SyncGroup -> REBALANCE_IN_PROGRESS
            Heartbeat -> REBALANCE_IN_PROGRESS, and the member's session is refreshed
            LeaveGroup -> the member is removed; the join phase completes if everyone left has rejoined
            OffsetCommit -> accepted from members of the current generation (refreshes the session)
            OffsetFetch -> allowed
            OffsetDelete -> NON_EMPTY_GROUP unless the group uses the consumer protocol
    transition: join phase completes with members -> COMPLETING_REBALANCE (generation + 1)
                join phase completes with no members -> EMPTY (generation + 1)
    """

    COMPLETING_REBALANCE = "CompletingRebalance"
    """The new generation is formed; waiting for the leader's SyncGroup with the assignment.

    action: SyncGroup from a follower -> parked until the leader's assignment is written
            SyncGroup from the leader -> assignment written (GroupMetadata record), then every parked
                                         SyncGroup is answered
            JoinGroup from a member with unchanged protocols -> the current generation is returned again
            Heartbeat -> NONE (the session is refreshed)
            OffsetCommit -> REBALANCE_IN_PROGRESS
    transition: leader SyncGroup written -> STABLE
                JoinGroup from a new member, from a member with changed protocols, or a replaced static
                member; LeaveGroup; session expiry; sync timeout -> PREPARING_REBALANCE
    """

    STABLE = "Stable"
    """Every member has its assignment.

    action: Heartbeat -> NONE
            SyncGroup -> the stored assignment
            JoinGroup from a follower with unchanged protocols -> the current generation, no rebalance
            JoinGroup from a static member with an unknown member id -> the member id is replaced in
                place (no rebalance while the selected protocol holds)
            OffsetCommit -> accepted from members of the current generation
    transition: JoinGroup from the leader (always), from a new member or with changed protocols;
                LeaveGroup; session expiry -> PREPARING_REBALANCE
    """

    DEAD = "Dead"
    """The group is being removed; it is no longer in the coordinator's map.

    action: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit -> COORDINATOR_NOT_AVAILABLE
            OffsetFetch -> nothing committed
            DescribeGroups -> Dead (v6: GROUP_ID_NOT_FOUND)
    transition: none
    """

    @property
    def valid_previous_states(self) -> frozenset[ClassicGroupState]:
        return _VALID_PREVIOUS_STATES[self]

    def can_transition_from(self, current: ClassicGroupState) -> bool:
        return current in _VALID_PREVIOUS_STATES[self]

    def __str__(self) -> str:
        return self.value


_S = ClassicGroupState
_VALID_PREVIOUS_STATES: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
}
