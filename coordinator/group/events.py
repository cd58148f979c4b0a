"""What the group state machine tells its listeners, and the categories operators see.

The state machine (coordinator.shard and its managers, through coordinator.group.effects.Calls) calls
`on_group_event(event)` on each listener synchronously, inside the call that caused the event, with timestamps
from its injected clock. A listener must be quick, must not call back into the state machine, and cannot change
what the state machine does: an exception it raises is logged and swallowed. Observers (coordinator.observability)
live above the state machine and import this module; it imports nothing of ours.

Rebalance reasons are a small closed set so they can be a Prometheus label (user-needs §A.2): the state machine
knows which of its code paths started a rebalance, and the client's own KIP-800 text (JoinGroup v8+, LeaveGroup
v5+) travels beside the category, never as a label. Two categories are refined from what the client says or
how it asked: a LeaveGroup that names a static member by instance id with an empty member id is an admin
removal (AdminClient.removeMembersFromConsumerGroup), as is one whose reason is the admin client's default text;
a LeaveGroup whose reason says the client's poll timeout expired (the Java consumer sends "consumer poll timeout
has expired." when max.poll.interval.ms passes) counts as a rebalance-timeout expiry, the same category as the
coordinator's own expiry of members that do not sync within the rebalance timeout. librdkafka and kafka-python
leave on a poll timeout without a reason, so for them such a departure reads as `leave`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Protocol


class RebalanceReason(enum.Enum):
    """Why a group started a rebalance; the value is the `reason` label."""

    NEW_MEMBER = "new_member"
    """A member joined (the first member of an Empty group included)."""
    LEAVE = "leave"
    """A member sent LeaveGroup."""
    SESSION_EXPIRY = "session_expiry"
    """A member's session timer expired (no heartbeat within session.timeout.ms), or a new member's join waited
    longer than the new-member timeout."""
    REBALANCE_TIMEOUT = "rebalance_timeout"
    """Members did not send SyncGroup within the rebalance timeout, or a client left saying its poll timeout
    (max.poll.interval.ms, which it sends as the rebalance timeout) expired."""
    METADATA_CHANGE = "metadata_change"
    """A member rejoined with different protocols or subscription metadata."""
    LEADER_REJOIN = "leader_rejoin"
    """The leader rejoined a Stable group (it does so to have assignments recomputed, e.g. new partitions)."""
    STATIC_REPLACEMENT = "static_replacement"
    """A static member came back under a new member id and changed the selected protocol, or was replaced
    while the leader was assigning."""
    ADMIN = "admin"
    """An administrator removed members (LeaveGroup by group instance id)."""
    PAUSE = "pause"
    """The group or some of its topics was paused or resumed on the coordinator (admin API or CLI)."""
    COORDINATOR = "coordinator"
    """The coordinator's own reasons: a group loaded over group.max.size, or a failed write of an assignment."""


class RemovalCause(enum.Enum):
    """Why a member left a group; the value is the `cause` label of member expirations."""

    LEFT = "left"
    ADMIN_REMOVED = "admin_removed"
    SESSION_TIMEOUT = "session_timeout"
    REBALANCE_TIMEOUT = "rebalance_timeout"
    """A dynamic member did not rejoin before the join phase ended (the rebalance timeout)."""
    SYNC_TIMEOUT = "sync_timeout"
    """A member did not send SyncGroup within the rebalance timeout."""
    NEW_MEMBER_TIMEOUT = "new_member_timeout"
    PENDING_MEMBER_TIMEOUT = "pending_member_timeout"
    """A KIP-394 pending member id was never used to join."""
    GROUP_MAX_SIZE = "group_max_size"

    @property
    def is_expiration(self) -> bool:
        """The coordinator removed the member because a timer ran out (not because anyone asked)."""
        return self in _EXPIRATIONS


_EXPIRATIONS = frozenset(
    {
        RemovalCause.SESSION_TIMEOUT,
        RemovalCause.REBALANCE_TIMEOUT,
        RemovalCause.SYNC_TIMEOUT,
        RemovalCause.NEW_MEMBER_TIMEOUT,
        RemovalCause.PENDING_MEMBER_TIMEOUT,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class MemberInfo:
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""

    @property
    def identity(self) -> str:
        """What stays the same across a static member's restarts: its instance id; else its member id."""
        return self.group_instance_id if self.group_instance_id is not None else self.member_id


@dataclasses.dataclass(frozen=True, slots=True)
class RebalanceTrigger:
    """What a code path of the state machine hands to `_prepare_rebalance`."""

    reason: RebalanceReason
    member: MemberInfo | None = None
    client_reason: str | None = None  # the client's KIP-800 text, as sent


# -- events --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GroupLoaded:
    """A group read from the log when the shard loaded (so listeners know its members without a rebalance)."""

    group_id: str
    generation_id: int
    state: str
    members: tuple[MemberInfo, ...]
    wall_ms: int
    monotonic_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class RebalanceStarted:
    """The group moved to PreparingRebalance."""

    group_id: str
    generation_id: int  # the generation being replaced
    previous_state: str
    reason: RebalanceReason
    member: MemberInfo | None  # who triggered it, when one member did
    client_reason: str | None
    detail: str  # the coordinator's own description (the text of its log line)
    member_count: int  # members at this moment
    wall_ms: int
    monotonic_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class JoinPhaseCompleted:
    """The join phase ended: a new generation with these members (CompletingRebalance), or Empty."""

    group_id: str
    generation_id: int
    state: str
    leader_id: str | None
    protocol_name: str | None
    members: tuple[MemberInfo, ...]
    wall_ms: int
    monotonic_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class RebalanceCompleted:
    """The leader's assignment arrived and the group is Stable (Kafka's CompletedRebalances sensor)."""

    group_id: str
    generation_id: int
    wall_ms: int
    monotonic_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class MemberRemoved:
    group_id: str
    member: MemberInfo
    cause: RemovalCause
    generation_id: int
    wall_ms: int
    monotonic_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class MemberFenced:
    """A request was answered FENCED_INSTANCE_ID: `member_id` used an instance id that `holder_member_id` holds."""

    group_id: str
    group_instance_id: str | None
    member_id: str
    holder_member_id: str | None
    api: str
    wall_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class StaticMemberReplaced:
    """A static member rejoined with an unknown member id and took over its instance's place."""

    group_id: str
    group_instance_id: str
    old_member_id: str
    new_member_id: str
    wall_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupRemoved:
    """The group was deleted (DeleteGroups, offset retention) or unloaded."""

    group_id: str
    wall_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetsWritten:
    """Offset records a handler emitted for one group: commits (OffsetCommit) or tombstones, by why.

    Counted when emitted, as Kafka's OffsetCommits/OffsetExpired/OffsetDeletions sensors are."""

    group_id: str
    committed: int = 0
    expired: int = 0
    deleted: int = 0


GroupEvent = (
    GroupLoaded
    | RebalanceStarted
    | JoinPhaseCompleted
    | RebalanceCompleted
    | MemberRemoved
    | MemberFenced
    | StaticMemberReplaced
    | GroupRemoved
    | OffsetsWritten
)


class GroupEventListener(Protocol):
    def on_group_event(self, event: GroupEvent) -> None: ...


# -- categorisation ------------------------------------------------------------------------------------------

# The Java consumer's LeaveGroup reason when max.poll.interval.ms passes ("consumer poll timeout has expired.").
_POLL_TIMEOUT = re.compile(r"poll timeout|max\.poll\.interval", re.IGNORECASE)
# The admin client's default LeaveGroup reason (KIP-800: "member was removed by an admin.").
_ADMIN = re.compile(r"removed by (an )?admin", re.IGNORECASE)


def leave_reason(member_id: str, group_instance_id: str | None, client_reason: str | None) -> RebalanceReason:
    """The category of a rebalance started by a LeaveGroup (see the module doc)."""
    if (not member_id and group_instance_id is not None) or (client_reason and _ADMIN.search(client_reason)):
        return RebalanceReason.ADMIN
    if client_reason and _POLL_TIMEOUT.search(client_reason):
        return RebalanceReason.REBALANCE_TIMEOUT
    return RebalanceReason.LEAVE


def leave_cause(reason: RebalanceReason) -> RemovalCause:
    return RemovalCause.ADMIN_REMOVED if reason is RebalanceReason.ADMIN else RemovalCause.LEFT
