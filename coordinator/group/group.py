"""A classic group and its members, in memory (Kafka's ClassicGroup and ClassicGroupMember).

The group object holds both halves of a group's state: the durable half (protocol type, generation, selected
protocol, leader, and each member's instance id, timeouts, protocols and assignment — what a GroupMetadata
record carries) and the volatile half that exists only while the coordinator runs (state during a rebalance,
pending member ids, parked JoinGroup/SyncGroup requests, the members that still owe a SyncGroup). It knows
nothing of time, timers or responses: the manager drives it and turns parked requests into responses.

A parked request is a `Parked(token, api_version)`: the opaque token the runtime gave the request, and its
version, which decides the shape of the answer (JoinGroup v9 SkipAssignment, ProtocolName "" before v7).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from protocol.consumer import parse_subscription_topics
from protocol.errors import ErrorCode

from .state import ClassicGroupState, IllegalStateTransition

CONSUMER_PROTOCOL_TYPE = "consumer"
"""The protocol type of Kafka consumers; only their subscriptions can be read by the coordinator."""

Protocols = tuple[tuple[str, bytes], ...]
"""A member's supported protocols in its order of preference: (name, metadata)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Parked:
    """A JoinGroup or SyncGroup request that waits for the group: answered later, exactly once."""

    token: object
    api_version: int


@dataclasses.dataclass(eq=False, slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    awaiting_join: Parked | None = None
    awaiting_sync: Parked | None = None
    is_new: bool = False  # joined during the current rebalance: its session timer runs even while it waits
    offline_since_ms: int | None = (
        None  # a static member whose session expired inside its registration window
    )
    joined_at_ms: int = 0  # when a new member's JoinGroup was held back by an expansion window
    # The pause state (coordinator.group.pause.PauseState) its last assignment was delivered under; None: none yet.
    delivered_pause: object | None = None
    # (group id, member id, timer key, operation) of its session timer, made once: every heartbeat and commit
    # schedules it again (coordinator.group.rebalance), and the key and operation are the same each time
    session_timer: tuple[str, str, str, Any] | None = dataclasses.field(default=None, repr=False)

    @property
    def is_offline(self) -> bool:
        return self.offline_since_ms is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol_name}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether the member is alive for the session timer: a member waiting in a rebalance counts as alive,
        except a new member, whose join expires after the new-member timeout."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols, same metadata, same order."""
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among the candidates."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class ClassicGroup:
    def __init__(
        self,
        group_id: str,
        state: ClassicGroupState,
        *,
        current_state_timestamp_ms: int = -1,
        generation_id: int = 0,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = ClassicGroupState.DEAD
        self.current_state_timestamp_ms = current_state_timestamp_ms
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self._members: dict[str, ClassicGroupMember] = {}
        self._static_members: dict[str, str] = {}  # group instance id -> member id
        self._pending_join_members: dict[str, None] = {}  # KIP-394 member ids handed out, not yet joined
        self._pending_sync_members: dict[str, None] = {}  # members that owe a SyncGroup this generation
        self._num_awaiting_join = 0
        self._supported_protocols: collections.Counter[str] = collections.Counter()
        self.subscribed_topics: frozenset[str] | None = None
        self.new_member_added = False  # a member joined during the initial rebalance: extend its delay
        # New members whose JoinGroup waits for an expansion window to end; not members of the group yet.
        self.expansion_joiners: dict[str, ClassicGroupMember] = {}
        self.expansion_opened_ms = 0  # when the first of them joined
        self._offline: dict[str, None] = {}  # static members offline inside their registration window

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state}, generation={self.generation_id}, "
            f"protocol_type={self.protocol_type!r}, members={list(self._members)})"
        )

    # -- state -----------------------------------------------------------------------------------------------

    def is_in_state(self, state: ClassicGroupState) -> bool:
        return self.state is state

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if not target.can_transition_from(self.state):
            raise IllegalStateTransition(
                f"group {self.group_id} cannot move from {self.state} to {target}; it must be in one of "
                f"{sorted(str(s) for s in target.valid_previous_states)}"
            )
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return ClassicGroupState.PREPARING_REBALANCE.can_transition_from(self.state)

    def is_empty(self) -> bool:
        return self.state is ClassicGroupState.EMPTY

    def is_simple_group(self) -> bool:
        """A protocol-less group that exists only for its committed offsets."""
        return self.protocol_type is None and self.is_empty() and not self._pending_join_members

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # -- members ---------------------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self._members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self._members[member_id]

    def all_members(self) -> Iterator[ClassicGroupMember]:
        return iter(list(self._members.values()))

    def all_member_ids(self) -> list[str]:
        return list(self._members)

    def num_members(self) -> int:
        return len(self._members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self._static_members.get(group_instance_id)

    def has_static_member(self, group_instance_id: str) -> bool:
        return group_instance_id in self._static_members

    def all_static_member_ids(self) -> set[str]:
        return set(self._static_members.values())

    def all_dynamic_member_ids(self) -> set[str]:
        return set(self._members) - set(self._static_members.values())

    def add(self, member: ClassicGroupMember, parked: Parked | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self._static_members:
                raise ValueError(f"static member {member.group_instance_id} already in group {self.group_id}")
            self._static_members[member.group_instance_id] = member.member_id
        if not self._members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the group and member protocol types must be the same")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise ValueError("none of the member's protocols is supported by the group")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self._members[member.member_id] = member
        self._supported_protocols.update(member.protocol_names())
        member.awaiting_join = parked
        if parked is not None:
            self._num_awaiting_join += 1
        self._pending_join_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        removed = self._members.pop(member_id, None)
        if removed is not None:
            self._supported_protocols.subtract(removed.protocol_names())
            if removed.is_awaiting_join:
                self._num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self._static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self._members), None)
        self._pending_join_members.pop(member_id, None)
        self._pending_sync_members.pop(member_id, None)
        self._offline.pop(member_id, None)

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        parked: Parked | None,
    ) -> None:
        self._supported_protocols.subtract(member.protocol_names())
        member.protocols = protocols
        self._supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if parked is not None and not member.is_awaiting_join:
            self._num_awaiting_join += 1
        elif parked is None and member.is_awaiting_join:
            self._num_awaiting_join -= 1
        member.awaiting_join = parked

    def take_join(self, member: ClassicGroupMember) -> Parked | None:
        """Unpark the member's JoinGroup, if any, for the caller to answer."""
        parked = member.awaiting_join
        if parked is not None:
            member.awaiting_join = None
            self._num_awaiting_join -= 1
        return parked

    def take_sync(self, member: ClassicGroupMember) -> Parked | None:
        """Unpark the member's SyncGroup, if any, for the caller to answer."""
        parked = member.awaiting_sync
        member.awaiting_sync = None
        return parked

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicGroupMember:
        """Move a static member to a new member id, keeping its assignment and leadership. The caller first
        answers the old member's parked requests (they are fenced)."""
        old = self._members.pop(old_member_id, None)
        if old is None:
            raise KeyError(f"cannot replace unknown member {old_member_id}")
        if old.is_awaiting_join or old.is_awaiting_sync:
            raise ValueError(f"member {old_member_id} still has parked requests")
        new = dataclasses.replace(
            old,
            member_id=new_member_id,
            awaiting_join=None,
            awaiting_sync=None,
            is_new=False,
            offline_since_ms=None,
        )
        self._members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self._static_members[group_instance_id] = new_member_id
        self._offline.pop(old_member_id, None)
        if old_member_id in self._pending_sync_members:
            # The new id still owes the SyncGroup the old one did (Kafka leaves the old id pending, so the
            # sync expiry would rebalance even after the new id synced).
            del self._pending_sync_members[old_member_id]
            self._pending_sync_members[new_member_id] = None
        return new

    def maybe_elect_new_joined_leader(self) -> bool:
        """At the end of a join phase: keep the leader if it rejoined, else elect a member that did. False if
        no member rejoined (or there is no leader)."""
        if self.leader_id is None:
            return False
        if self._members[self.leader_id].is_awaiting_join:
            return True
        for member in self._members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self._members.values() if not m.is_awaiting_join]

    def num_awaiting_join(self) -> int:
        return self._num_awaiting_join

    def has_all_members_joined(self) -> bool:
        """The join barrier: every known member waits in JoinGroup and no pending member id is outstanding.
        An offline static member inside its registration window is not waited for: it keeps its place."""
        return (
            len(self._members) - self.num_offline_members() == self._num_awaiting_join
            and not self._pending_join_members
        )

    def offline_members(self) -> list[ClassicGroupMember]:
        return [self._members[member_id] for member_id in self._offline]

    def num_offline_members(self) -> int:
        return len(self._offline)

    def mark_offline(self, member: ClassicGroupMember, now_ms: int) -> None:
        if member.member_id not in self._members:
            raise ValueError(f"{member.member_id} is not a member of group {self.group_id}")
        member.offline_since_ms = now_ms
        self._offline[member.member_id] = None

    def mark_online(self, member: ClassicGroupMember) -> None:
        member.offline_since_ms = None
        self._offline.pop(member.member_id, None)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    # -- pending members (KIP-394) and pending syncs ---------------------------------------------------------

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self._pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self._members:
            raise ValueError(f"{member_id} is already a member of group {self.group_id}")
        self._pending_join_members[member_id] = None

    def remove_pending_member(self, member_id: str) -> None:
        self._pending_join_members.pop(member_id, None)

    def num_pending_join_members(self) -> int:
        return len(self._pending_join_members)

    def pending_join_members(self) -> list[str]:
        return list(self._pending_join_members)

    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self._members:
            raise ValueError(f"{member_id} is not a member of group {self.group_id}")
        self._pending_sync_members[member_id] = None

    def remove_pending_sync_member(self, member_id: str) -> None:
        self._pending_sync_members.pop(member_id, None)

    def has_received_sync_from_all_members(self) -> bool:
        return not self._pending_sync_members

    def pending_sync_members(self) -> list[str]:
        return list(self._pending_sync_members)

    def clear_pending_sync_members(self) -> None:
        self._pending_sync_members.clear()

    # -- protocols -------------------------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        names = list(protocol_names)
        if self.is_empty():
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols[name] == len(self._members) for name in names
        )

    def candidate_protocols(self) -> set[str]:
        return {name for name, count in self._supported_protocols.items() if count == len(self._members)}

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol among those all members support; most votes wins
        (ties: the protocol voted first, in member order)."""
        if not self._members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = collections.Counter(member.vote(candidates) for member in self._members.values())
        return votes.most_common(1)[0][0]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self._members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(ClassicGroupState.EMPTY, now_ms)
        self.clear_pending_sync_members()

    def join_response_members(self) -> list[dict[str, object]]:
        """The member list the leader receives: ids, instance ids and metadata of the selected protocol."""
        if self.state in (ClassicGroupState.DEAD, ClassicGroupState.PREPARING_REBALANCE):
            raise IllegalStateTransition(
                f"no member metadata for group {self.group_id} in state {self.state}"
            )
        assert self.protocol_name is not None
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata(self.protocol_name),
            }
            for m in self._members.values()
        ]

    def group_assignment(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self._members.values()}

    # -- subscriptions (consumer protocol) -------------------------------------------------------------------

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members subscribe to, when the group uses the consumer protocol and every
        subscription parses; None when unknown. Parsed with Subscription v0, the prefix of every version."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self._members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self._members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    # -- validation (the per-API checks that do not depend on the manager) -----------------------------------

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            existing = self.static_member_id(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self._members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def validate_offset_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if self.is_in_state(ClassicGroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.is_empty():
            return ErrorCode.none  # a simple or admin commit: accepted while nobody is in the group
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error != ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not self.is_empty():
            return ErrorCode.unknown_member_id
        if self.is_in_state(ClassicGroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def validate_offset_delete(self) -> ErrorCode:
        if self.is_in_state(ClassicGroupState.DEAD):
            return ErrorCode.group_id_not_found
        if (
            self.state
            in (
                ClassicGroupState.STABLE,
                ClassicGroupState.PREPARING_REBALANCE,
                ClassicGroupState.COMPLETING_REBALANCE,
            )
            and not self.uses_consumer_protocol()
        ):
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def validate_delete_group(self) -> ErrorCode:
        if self.is_in_state(ClassicGroupState.DEAD):
            return ErrorCode.group_id_not_found
        if self.state in (
            ClassicGroupState.STABLE,
            ClassicGroupState.PREPARING_REBALANCE,
            ClassicGroupState.COMPLETING_REBALANCE,
        ):
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        """KIP-211: which timestamp an offset's retention counts from, as a function of its commit timestamp;
        None when the group's offsets must not expire now.

        An Empty group with a protocol type counts from when it became Empty (or from the commit, for a group
        read from an old record without a state timestamp); a Stable consumer-protocol group whose
        subscriptions are known counts from the commit (only offsets of topics it no longer subscribes to are
        candidates); a simple group (no protocol type) counts from the commit.
        """
        if self.protocol_type is not None:
            if self.is_empty():
                state_timestamp_ms = self.current_state_timestamp_ms
                if state_timestamp_ms >= 0:
                    return lambda commit_timestamp_ms: state_timestamp_ms
                return lambda commit_timestamp_ms: commit_timestamp_ms
            if (
                self.uses_consumer_protocol()
                and self.subscribed_topics is not None
                and self.is_in_state(ClassicGroupState.STABLE)
            ):
                return lambda commit_timestamp_ms: commit_timestamp_ms
            return None
        return lambda commit_timestamp_ms: commit_timestamp_ms
