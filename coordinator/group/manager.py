"""The classic groups of one shard: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (Kafka's GroupMetadataManager,
its classic half). The shard (coordinator.shard) routes requests here and composes this manager with the
offsets manager and the pause and settings registries.

Theory of operation
-------------------
One `GroupMetadataManager` holds every classic group of a shard. It is a pure state machine: it never reads the
system clock, never sleeps and does no I/O. Each API method takes an opaque `token` (the runtime's handle on the
request), the request's `api_version` and the kio request entity (any version: fields are read with the names
that version has), and returns a `CoordinatorResult` (what the call produced, collected by
coordinator.group.effects):

* `records` to append to the shard's log, in the layout of `__consumer_offsets` (coordinator.records);
* `responses`, `(token, answer)` pairs, released by the runtime only once `records` are durable;
* `on_append_failure`, set when the handler applied something that must be undone if the append fails.

A JoinGroup or SyncGroup that has to wait for the rest of the group is *parked*: its token is kept on the
member (`Parked(token, api_version)`) and the method returns no answer for it. A later call — another member's
JoinGroup or SyncGroup, a LeaveGroup, a timer operation — returns the parked tokens' answers in its own
result. Every token gets exactly one answer: when a parked request is superseded (the same member sends
another JoinGroup or SyncGroup while the first waits) or its member is removed, it is answered at once
(REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID) instead of being left to the client's request
timeout as Kafka does, because our connections answer in request order and a forgotten request would block the
connection.

Time comes from the injected `Clock`; delayed work goes through the injected `Timer` as operations (session
expiry, join completion, sync expiry) that return results of their own, which the runtime treats like a
request's.

Observers (registered with the shard) are told, synchronously and with this clock's timestamps, when a
rebalance starts (with its reason category: each code path that calls `_prepare_rebalance` names one), when its
join phase ends and when the group becomes Stable, when a member is removed and why, and when a request is
fenced (coordinator.group.events). Listeners observe; they change nothing here.

Durable state and replay
------------------------
Classic groups follow Kafka: the handlers change the in-memory group at once and write a GroupMetadata record
at the points Kafka does (a new group, a join phase that ends Empty, the leader's SyncGroup, a static member
replaced in place). Kafka does not replay these records while serving (`replayRecords = false`), because the
group in memory is already that state or newer; likewise the shard's `replay` skips every GroupMetadata record
this coordinator wrote itself (coordinator.group.effects counts them until they come back). Any other
GroupMetadata record comes from the log being loaded (`replay_group_metadata`): it recreates the group as Stable
with its members and assignments, or Empty; a tombstone removes it. `on_loaded()`, called once the log is
loaded, re-arms every member's session timer and rebalances groups over group.max.size. Group deletion
(DeleteGroups, offset retention, both the shard's) removes the group from memory and writes the tombstone.

What Kafka applies only once the write succeeds (the leader's assignment, the static member's new id) is
applied here at once, and undone by `on_append_failure` if the write fails: the answers then carry the error,
a failed assignment rebalances the group, a failed static replacement gives the member its old id back.

Two volatile additions ride on the classic state: static members marked offline inside their registration
window, and joiners held back by an expansion window (coordinator.group.windows); neither is written to the
log. Paused partitions (coordinator.group.pause) are withheld from the assignments members get.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from coordinator.clock import session_timeout_key, sync_key
from coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupOfflineValue,
    new_empty_group_metadata_record,
    new_group_metadata_record,
)
from protocol.errors import ErrorCode

from .effects import state_machine_call
from .events import (
    GroupLoaded,
    MemberInfo,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceTrigger,
    RemovalCause,
    StaticMemberReplaced,
    leave_cause,
    leave_reason,
)
from .group import ClassicGroup, ClassicGroupMember, Parked
from .rebalance import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicRebalancing,
    JoinRequest,
    join_timeouts,
    new_member,
)
from .responses import UNKNOWN_MEMBER_ID, heartbeat_response, join_response, leave_response, sync_response
from .settings import EXPANSION_TIMEOUT

log = logging.getLogger(__name__)


class GroupMetadataManager(ClassicRebalancing):
    """The classic group APIs of one shard (see the module doc)."""

    # ========================================================================================================
    # JoinGroup
    # ========================================================================================================

    @state_machine_call
    def join_group(
        self, token: object, api_version: int, request: Any, *, client_id: str = "", client_host: str = ""
    ) -> None:
        """JoinGroup v0-v9. `client_id` and `client_host` come from the request header and the connection."""
        self._fx.own_token = token
        session_timeout_ms, rebalance_timeout_ms = join_timeouts(api_version, request)
        join = JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            client_id=client_id,
            client_host=client_host,
            reason=getattr(request, "reason", None),
        )
        parked = Parked(token, api_version)
        if not join.group_id:
            self._join_error(parked, ErrorCode.invalid_group_id, join.member_id)
        elif not self.session_timeout_allowed(session_timeout_ms):
            self._join_error(parked, ErrorCode.invalid_session_timeout, join.member_id)
        else:
            self._classic_group_join(parked, join)

    def session_timeout_allowed(self, session_timeout_ms: int) -> bool:
        s = self.settings
        return s.group_min_session_timeout_ms <= session_timeout_ms <= s.group_max_session_timeout_ms

    def _classic_group_join(self, parked: Parked, join: JoinRequest) -> None:
        is_unknown_member = join.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(join.group_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown_member:
                self._join_error(parked, ErrorCode.unknown_member_id, join.member_id)
                return
            group = self.create_group(join.group_id)

        if not self._accept_joining_member(group, join.member_id, join.group_instance_id):
            if group.has_member(join.member_id):
                self._emit_removed(
                    group, self._member_info(group.member(join.member_id)), RemovalCause.GROUP_MAX_SIZE
                )
            self._drop_member(group, join.member_id, ErrorCode.group_max_size_reached)
            self._join_error(parked, ErrorCode.group_max_size_reached)
        elif is_unknown_member:
            self._joinnew_member(parked, join, group)
        else:
            self._join_existing_member(parked, join, group)

        if is_new_group and not self._fx.records:
            # The group exists once this record is durable (Kafka's newEmptyGroupMetadataRecord).
            self._fx.records.append(
                new_empty_group_metadata_record(group.group_id, group.current_state_timestamp_ms)
            )
            self._fx.failure_hooks.append(functools.partial(self._revert_new_group, group))

    def _revert_new_group(self, group: ClassicGroup, error: ErrorCode) -> dict[object, Any]:
        """The record creating the group failed: forget the group if nothing durable was written since."""
        if self.groups.get(group.group_id) is group and group.generation_id == 0:
            for member in group.all_members():
                self._answer_join(group, member, error=error)
            self.remove_group(group)
        return {}

    def _accept_joining_member(
        self, group: ClassicGroup, member_id: str, group_instance_id: str | None
    ) -> bool:
        """group.max.size (KIP-389). While preparing a rebalance only members waiting in JoinGroup count, so
        the last members to rejoin a group over the limit are the ones turned away. A known static instance
        joining with an unknown member id only replaces itself, so it is let in even when the group is full
        (Kafka made the same exception for consumer groups in KAFKA-20601)."""
        if group.state in (EMPTY, DEAD):
            return True
        if (
            member_id == UNKNOWN_MEMBER_ID
            and group_instance_id is not None
            and group.has_static_member(group_instance_id)
        ):
            return True
        if group.is_in_state(PREPARING_REBALANCE):
            return (
                group.has_member(member_id) and group.member(member_id).is_awaiting_join
            ) or group.num_awaiting_join() < self.settings.group_max_size
        return (
            group.has_member(member_id)
            or member_id in group.expansion_joiners
            or group.num_members() + len(group.expansion_joiners) < self.settings.group_max_size
        )

    def _joinnew_member(self, parked: Parked, join: JoinRequest, group: ClassicGroup) -> None:
        if group.is_in_state(DEAD):
            self._join_error(parked, ErrorCode.coordinator_not_available)
        elif not group.supports_protocols(join.protocol_type, join.protocol_names()):
            self._join_error(parked, ErrorCode.inconsistent_group_protocol)
        else:
            new_member_id = self._generate_member_id(join.client_id, join.group_instance_id)
            if join.group_instance_id is not None:
                existing_member_id = group.static_member_id(join.group_instance_id)
                if existing_member_id is not None:
                    log.info(
                        "static member %s of group %s rejoins with an unknown member id in state %s: "
                        "replacing member %s",
                        join.group_instance_id,
                        group.group_id,
                        group.state,
                        existing_member_id,
                    )
                    self._update_static_member_then_rebalance_or_complete_join(
                        parked, join, group, existing_member_id, new_member_id
                    )
                else:
                    self._add_member_then_rebalance_or_complete_join(parked, join, group, new_member_id)
            elif parked.api_version >= 4:
                # KIP-394: hand out a member id and wait for the member to come back with it. The pending id
                # counts in the join barrier and expires with the session timeout.
                group.add_pending_member(new_member_id)
                self.timer.schedule(
                    session_timeout_key(group.group_id, new_member_id),
                    join.session_timeout_ms,
                    self._op(self._expire_heartbeat, group.group_id, new_member_id),
                )
                self._join_error(parked, ErrorCode.member_id_required, new_member_id)
            else:
                self._add_member_then_rebalance_or_complete_join(parked, join, group, new_member_id)

    def _join_existing_member(self, parked: Parked, join: JoinRequest, group: ClassicGroup) -> None:
        member_id = join.member_id
        if group.is_in_state(DEAD):
            self._join_error(parked, ErrorCode.coordinator_not_available, member_id)
            return
        if not group.supports_protocols(join.protocol_type, join.protocol_names()):
            self._join_error(parked, ErrorCode.inconsistent_group_protocol, member_id)
            return
        if member_id in group.expansion_joiners:
            # A held-back joiner sent JoinGroup again: it keeps its place in the window.
            joiner = group.expansion_joiners[member_id]
            self._supersede_join(joiner)
            joiner.awaiting_join = parked
            joiner.protocols = join.protocols
            joiner.rebalance_timeout_ms = join.rebalance_timeout_ms
            joiner.session_timeout_ms = join.session_timeout_ms
            self._schedule_expansion_end(group)
            return
        if group.is_pending_member(member_id):
            if join.group_instance_id is not None:
                # A pending member id is only ever handed to dynamic members (Kafka throws here).
                self._join_error(parked, ErrorCode.unknown_server_error, member_id)
                return
            self._add_member_then_rebalance_or_complete_join(parked, join, group, member_id)
            return
        error = group.validate_member(member_id, join.group_instance_id)
        if error != ErrorCode.none:
            if error == ErrorCode.fenced_instance_id:
                self.emit_fenced(group, member_id, join.group_instance_id, "JoinGroup")
            self._join_error(parked, error, member_id)
            return

        member = group.member(member_id)
        self._mark_online(group, member)
        if group.is_in_state(PREPARING_REBALANCE):
            self._update_member_then_rebalance_or_complete_join(
                parked,
                join,
                group,
                member,
                f"member {member_id} joins during {group.state}",
                RebalanceReason.METADATA_CHANGE,
            )
        elif group.is_in_state(COMPLETING_REBALANCE):
            if member.matches(join.protocols):
                # The member lost the JoinGroup answer: give the current generation again.
                self._respond(
                    parked.token,
                    self._current_generation_response(
                        group, parked.api_version, member_id, with_members=group.is_leader(member_id)
                    ),
                )
            else:
                self._update_member_then_rebalance_or_complete_join(
                    parked,
                    join,
                    group,
                    member,
                    f"member {member_id} changed its protocols during {group.state}",
                    RebalanceReason.METADATA_CHANGE,
                )
        elif group.is_in_state(STABLE):
            if group.is_leader(member_id):
                # The leader may rejoin to have assignments recomputed for changes the coordinator cannot see
                # (new partitions, regex subscriptions): it always rebalances.
                self._update_member_then_rebalance_or_complete_join(
                    parked,
                    join,
                    group,
                    member,
                    f"leader {member_id} rejoins during {group.state}",
                    RebalanceReason.LEADER_REJOIN,
                )
            elif not member.matches(join.protocols):
                self._update_member_then_rebalance_or_complete_join(
                    parked,
                    join,
                    group,
                    member,
                    f"member {member_id} changed its protocols during {group.state}",
                    RebalanceReason.METADATA_CHANGE,
                )
            else:
                # A follower with unchanged metadata never rebalances the group.
                self._respond(
                    parked.token,
                    self._current_generation_response(
                        group, parked.api_version, member_id, with_members=False
                    ),
                )
        else:
            log.warning(
                "member %s rejoins group %s in unexpected state %s", member_id, group.group_id, group.state
            )
            self._join_error(parked, ErrorCode.unknown_member_id, member_id)

    def _current_generation_response(
        self, group: ClassicGroup, api_version: int, member_id: str, *, with_members: bool
    ) -> Any:
        return join_response(
            api_version,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id,
            members=group.join_response_members() if with_members else (),
        )

    def _add_member_then_rebalance_or_complete_join(
        self, parked: Parked, join: JoinRequest, group: ClassicGroup, member_id: str
    ) -> None:
        if group.is_in_state(STABLE) and self.group_settings.value(group.group_id, EXPANSION_TIMEOUT) > 0:
            self._hold_joiner(parked, join, group, member_id)
            return
        member = new_member(member_id, join)
        if group.is_in_state(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay (KIP-134)
        group.add(member, parked)
        # A new member cannot heartbeat while its JoinGroup waits, so its join expires on a fixed timeout
        # instead of its session timeout; a client that gave up and retried leaves no defunct member behind.
        self._reschedule_heartbeat(group, member, self.settings.group_new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group,
            f"adding new member {member_id} with group instance id {join.group_instance_id}; "
            f"client reason: {join.reason}",
            RebalanceTrigger(RebalanceReason.NEW_MEMBER, self._member_info(member), join.reason),
        )

    def _update_member_then_rebalance_or_complete_join(
        self,
        parked: Parked,
        join: JoinRequest,
        group: ClassicGroup,
        member: ClassicGroupMember,
        reason: str,
        category: RebalanceReason = RebalanceReason.METADATA_CHANGE,
    ) -> None:
        self._supersede_join(member)
        group.update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, parked
        )
        self._maybe_prepare_rebalance_or_complete_join(
            group,
            f"{reason}; client reason: {join.reason}",
            RebalanceTrigger(category, self._member_info(member), join.reason),
        )

    def _supersede_join(self, member: ClassicGroupMember) -> None:
        """A member sent JoinGroup again while its previous one waits: the previous one is answered now."""
        if member.awaiting_join is not None:
            previous = member.awaiting_join
            self._respond(
                previous.token,
                join_response(
                    previous.api_version, error=ErrorCode.rebalance_in_progress, member_id=member.member_id
                ),
            )

    def _update_static_member_then_rebalance_or_complete_join(
        self, parked: Parked, join: JoinRequest, group: ClassicGroup, old_member_id: str, new_member_id: str
    ) -> None:
        assert join.group_instance_id is not None
        instance_id = join.group_instance_id
        current_leader = group.leader_id
        new_member = self._replace_static_member(group, instance_id, old_member_id, new_member_id)
        if self.listeners:
            self._emit(
                StaticMemberReplaced(
                    group.group_id, instance_id, old_member_id, new_member_id, self.clock.wall_ms()
                )
            )
        static_trigger = RebalanceTrigger(
            RebalanceReason.STATIC_REPLACEMENT,
            MemberInfo(new_member_id, instance_id, join.client_id, join.client_host),
            join.reason,
        )
        # The old id's session timer fires without effect (no such member); the new id gets its own.
        self._reschedule_heartbeat(group, new_member)
        old_rebalance_timeout_ms = new_member.rebalance_timeout_ms
        old_session_timeout_ms = new_member.session_timeout_ms
        old_protocols = new_member.protocols
        group.update_member(
            new_member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, parked
        )

        if group.is_in_state(STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # Same selected protocol: persist the new member id, no rebalance. The answer leaves once the
                # record is durable; if the write fails the member gets its old id back.
                log.info(
                    "static member %s of group %s rejoins in Stable without changing the selected protocol: "
                    "no rebalance",
                    instance_id,
                    group.group_id,
                )
                self._fx.records.append(new_group_metadata_record(group, group.group_assignment()))
                if parked.api_version >= 9:
                    # KIP-814: a rejoining leader gets the member list and skips the assignment, so it learns
                    # of metadata changes it missed while away.
                    is_leader = group.is_leader(new_member_id)
                    self._answer_join(
                        group,
                        new_member,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id,
                        members=group.join_response_members() if is_leader else (),
                        skip_assignment=is_leader,
                    )
                else:
                    # Before v9 the answer names the old leader id, so a rejoining leader acts as a follower
                    # and does not run an assignment for a generation that already has one.
                    self._answer_join(
                        group,
                        new_member,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader,
                    )

                def revert(error: ErrorCode) -> dict[object, Any]:
                    if (
                        self.groups.get(group.group_id) is group
                        and group.static_member_id(instance_id) == new_member_id
                    ):
                        member = group.member(new_member_id)
                        self._supersede_join(member)
                        group.update_member(
                            member, old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms, None
                        )
                        old_member = self._replace_static_member(
                            group, instance_id, new_member_id, old_member_id
                        )
                        self._reschedule_heartbeat(group, old_member)
                    return {
                        parked.token: join_response(
                            parked.api_version,
                            error=error,
                            member_id=UNKNOWN_MEMBER_ID,
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=current_leader,
                        )
                    }

                self._fx.failure_hooks.append(revert)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group,
                    f"static member {new_member_id} with instance id {instance_id} changes the selected "
                    f"protocol; client reason: {join.reason}",
                    static_trigger,
                )
        elif group.is_in_state(COMPLETING_REBALANCE):
            # The leader may already be assigning for the old member id: rebalance so the new id gets its
            # share.
            self._prepare_rebalance(
                group,
                f"static member {new_member_id} with instance id {instance_id} "
                f"replaced during {group.state}; client reason: {join.reason}",
                static_trigger,
            )
        else:
            self._maybe_complete_join_phase(group)

    def _replace_static_member(
        self, group: ClassicGroup, instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicGroupMember:
        """Move a static member to a new id; whoever still waits under the old id is fenced."""
        old = group.member(old_member_id)
        if old.awaiting_join is not None:
            self.emit_fenced(group, old_member_id, instance_id, "JoinGroup")
        if old.awaiting_sync is not None:
            self.emit_fenced(group, old_member_id, instance_id, "SyncGroup")
        self._answer_join(group, old, error=ErrorCode.fenced_instance_id, member_id=old_member_id)
        self._answer_sync(group, old, error=ErrorCode.fenced_instance_id)
        new = group.replace_static_member(instance_id, old_member_id, new_member_id)
        if old.is_offline:
            log.info(
                "static member %s of group %s is back after %d ms offline",
                instance_id,
                group.group_id,
                self.clock.monotonic_ms() - (old.offline_since_ms or 0),
            )
            self._schedule_registration_end(group)
        return new

    # ========================================================================================================
    # SyncGroup
    # ========================================================================================================

    @state_machine_call
    def sync_group(self, token: object, api_version: int, request: Any) -> None:
        """SyncGroup v0-v5."""
        self._fx.own_token = token
        group_id = request.group_id
        member_id = request.member_id
        instance_id = getattr(request, "group_instance_id", None)
        generation_id = int(request.generation_id)
        protocol_type = getattr(request, "protocol_type", None)
        protocol_name = getattr(request, "protocol_name", None)
        if not group_id:
            self._respond(token, sync_response(error=ErrorCode.invalid_group_id))
            return
        if api_version >= 5 and (protocol_type is None or protocol_name is None):
            # KIP-559: from v5 both are mandatory (Kafka checks this in KafkaApis).
            self._respond(token, sync_response(error=ErrorCode.inconsistent_group_protocol))
            return
        group = self.groups.get(group_id)
        if group is None or group.is_empty():
            self._respond(token, sync_response(error=ErrorCode.unknown_member_id))
            return

        if group.is_in_state(DEAD):
            error = ErrorCode.coordinator_not_available
        else:
            error = group.validate_member(member_id, instance_id)
            if error == ErrorCode.fenced_instance_id:
                self.emit_fenced(group, member_id, instance_id, "SyncGroup")
            if error == ErrorCode.none and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            if error == ErrorCode.none and (
                _inconsistent(protocol_type, group.protocol_type)
                or _inconsistent(protocol_name, group.protocol_name)
            ):
                error = ErrorCode.inconsistent_group_protocol
        if error == ErrorCode.none:
            self._mark_online(group, group.member(member_id))
        if error != ErrorCode.none:
            self._respond(token, sync_response(error=error))
        elif group.is_in_state(PREPARING_REBALANCE):
            self._respond(token, sync_response(error=ErrorCode.rebalance_in_progress))
        elif group.is_in_state(COMPLETING_REBALANCE):
            member = group.member(member_id)
            if member.awaiting_sync is not None:
                self._respond(
                    member.awaiting_sync.token, sync_response(error=ErrorCode.rebalance_in_progress)
                )
            member.awaiting_sync = Parked(token, api_version)
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._complete_sync_with_leader_assignment(group, request)
        elif group.is_in_state(STABLE):
            self._remove_pending_sync_member(group, member_id)
            self._respond(
                token,
                sync_response(
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=self.pauses.deliver(group, group.member(member_id)),
                ),
            )

    def _complete_sync_with_leader_assignment(self, group: ClassicGroup, request: Any) -> None:
        """The leader's SyncGroup: write the assignment, then answer every parked SyncGroup (released with the
        record), and the group is Stable."""
        assignment = {a.member_id: bytes(a.assignment) for a in request.assignments}
        missing = [m.member_id for m in group.all_members() if m.member_id not in assignment]
        if missing:
            log.warning(
                "setting empty assignments for members %s of group %s generation %d",
                missing,
                group.group_id,
                group.generation_id,
            )
        full_assignment = {m.member_id: assignment.get(m.member_id, b"") for m in group.all_members()}
        self._fx.records.append(new_group_metadata_record(group, full_assignment))
        generation_id = group.generation_id
        answered = self._set_and_propagate_assignment(group, full_assignment)
        group.transition_to(STABLE, self._now_ms())
        if self.listeners:
            self._emit(
                RebalanceCompleted(
                    group.group_id, generation_id, self.clock.wall_ms(), self.clock.monotonic_ms()
                )
            )
        log.info(
            "group %s generation %d is stable with %d members",
            group.group_id,
            generation_id,
            group.num_members(),
        )

        def on_failure(error: ErrorCode) -> dict[object, Any]:
            if (
                self.groups.get(group.group_id) is group
                and group.generation_id == generation_id
                and group.is_in_state(STABLE)
            ):
                for member in group.all_members():
                    member.assignment = b""
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"error {error.name} when storing the group assignment"
                )
            return {token: sync_response(error=error) for token in answered}

        self._fx.failure_hooks.append(on_failure)

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        if group.state in (DEAD, EMPTY, PREPARING_REBALANCE) or group.has_received_sync_from_all_members():
            self.timer.cancel(sync_key(group.group_id))

    # ========================================================================================================
    # Heartbeat
    # ========================================================================================================

    @state_machine_call
    def heartbeat(self, token: object, api_version: int, request: Any) -> None:
        """Heartbeat v0-v4."""
        self._respond(token, heartbeat_response(self._heartbeat(request)))

    def _heartbeat(self, request: Any) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.invalid_group_id
        group = self.groups.get(request.group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in_state(DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(request.member_id, getattr(request, "group_instance_id", None))
        if error == ErrorCode.fenced_instance_id:
            instance_id = getattr(request, "group_instance_id", None)
            self.emit_fenced(group, request.member_id, instance_id, "Heartbeat")
        if error != ErrorCode.none:
            return error
        self._mark_online(group, group.member(request.member_id))
        if int(request.generation_id) != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in_state(EMPTY):
            return ErrorCode.unknown_member_id
        self._reschedule_heartbeat(group, group.member(request.member_id))
        if group.is_in_state(PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ========================================================================================================
    # LeaveGroup
    # ========================================================================================================

    @state_machine_call
    def leave_group(self, token: object, api_version: int, request: Any) -> None:
        """LeaveGroup v0-v5: v0-v2 name one member and get one error; v3+ a batch with an error per member,
        where member id "" and a known group instance id removes that static member (admin removal)."""
        self._fx.own_token = token
        self._fx.own_error = lambda error: leave_response(api_version, error=error)
        if hasattr(request, "members") and (api_version >= 3 or not hasattr(request, "member_id")):
            identities = [
                (m.member_id, getattr(m, "group_instance_id", None), getattr(m, "reason", None))
                for m in request.members
            ]
        else:
            identities = [(request.member_id, None, None)]
        if not request.group_id:
            self._respond(token, leave_response(api_version, error=ErrorCode.invalid_group_id))
            return
        group = self.groups.get(request.group_id)
        if group is None:
            self._respond(
                token,
                leave_response(
                    api_version,
                    members=[
                        _member_response(member_id, instance_id, ErrorCode.unknown_member_id)
                        for member_id, instance_id, _ in identities
                    ],
                ),
            )
            return
        if group.is_in_state(DEAD):
            self._respond(token, leave_response(api_version, error=ErrorCode.coordinator_not_available))
            return

        responses = []
        triggers: list[RebalanceTrigger] = []
        joiners_left: set[str] = set()  # held back by an expansion window: never members, no rebalance
        for member_id, instance_id, reason in identities:
            client_reason = reason
            reason = reason if reason is not None else "not provided"
            category = leave_reason(member_id, instance_id, client_reason)
            if member_id == UNKNOWN_MEMBER_ID:
                static_member_id = group.static_member_id(instance_id) if instance_id is not None else None
                if static_member_id is not None:
                    triggers.append(self._leave_trigger(group, static_member_id, category, client_reason))
                    self._remove_current_member(group, static_member_id, reason)
                    responses.append(_member_response(member_id, instance_id, ErrorCode.none))
                else:
                    responses.append(_member_response(member_id, instance_id, ErrorCode.unknown_member_id))
            elif member_id in group.expansion_joiners:
                joiners_left.add(member_id)
                joiner = group.expansion_joiners.pop(member_id)
                self.timer.cancel(session_timeout_key(group.group_id, member_id))
                self._answer_parked_joiner(joiner, ErrorCode.unknown_member_id)
                self._schedule_expansion_end(group)
                responses.append(_member_response(member_id, instance_id, ErrorCode.none))
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.timer.cancel(session_timeout_key(group.group_id, member_id))
                log.info(
                    "pending member %s left group %s; client reason: %s", member_id, group.group_id, reason
                )
                responses.append(_member_response(member_id, instance_id, ErrorCode.none))
            else:
                error = group.validate_member(member_id, instance_id)
                if error == ErrorCode.none:
                    triggers.append(self._leave_trigger(group, member_id, category, client_reason))
                    self._remove_current_member(group, member_id, reason)
                elif error == ErrorCode.fenced_instance_id:
                    self.emit_fenced(group, member_id, instance_id, "LeaveGroup")
                responses.append(_member_response(member_id, instance_id, error))

        left = [
            r["member_id"]
            for r in responses
            if r["error_code"] == ErrorCode.none and r["member_id"] not in joiners_left
        ]
        if left:
            reason = f"explicit LeaveGroup request for members {left}"
            if group.state in (STABLE, COMPLETING_REBALANCE):
                trigger = triggers[0] if triggers else None
                self._maybe_prepare_rebalance_or_complete_join(group, reason, trigger)
            elif group.is_in_state(PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        self._respond(token, leave_response(api_version, members=responses))

    def _leave_trigger(
        self, group: ClassicGroup, member_id: str, category: RebalanceReason, client_reason: str | None
    ) -> RebalanceTrigger:
        """Report the departure of a member that is about to be removed by LeaveGroup; the trigger to use if
        the departure starts a rebalance."""
        info = self._member_info(group.member(member_id))
        self._emit_removed(group, info, leave_cause(category))
        return RebalanceTrigger(category, info, client_reason)

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        self.timer.cancel(session_timeout_key(group.group_id, member_id))
        log.info("member %s left group %s; client reason: %s", member_id, group.group_id, reason)
        self._drop_member(group, member_id, ErrorCode.unknown_member_id)

    # ========================================================================================================
    # For the shard: offset commits of members, admin changes, replay, loading
    # ========================================================================================================

    def member_committed(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """A member of a Stable or rebalancing group committed offsets: it is online, and its session goes on."""
        self._mark_online(group, member)
        self._reschedule_heartbeat(group, member)

    def rebalance_for_admin(self, group_id: str, reason: str) -> None:
        """An administrator changed what the group's members get (pause, resume): rebalance a group that has
        assignments."""
        group = self.groups.get(group_id)
        if group is not None and group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason, RebalanceTrigger(RebalanceReason.PAUSE))

    def detach_for_upgrade(self, group: ClassicGroup) -> None:
        """The group becomes a consumer group (coordinator.consumer.migration): its parked JoinGroup and SyncGroup
        requests are answered REBALANCE_IN_PROGRESS (their members join the consumer group again), joiners held
        back by a window are refused the same way, and the group is forgotten with its timers."""
        for member in group.all_members():
            self._answer_join(
                group,
                member,
                error=ErrorCode.rebalance_in_progress,
                member_id=member.member_id,
                generation_id=group.generation_id,
            )
            self._answer_sync(group, member, error=ErrorCode.rebalance_in_progress)
        for joiner in list(group.expansion_joiners.values()):
            self._answer_parked_joiner(joiner, ErrorCode.rebalance_in_progress)
        group.expansion_joiners.clear()
        self.remove_group(group)

    def restart_sessions(self, group: ClassicGroup) -> None:
        """A group detached for an upgrade is back (the upgrade could not be written): its sessions run again."""
        for member in group.all_members():
            self._reschedule_heartbeat(group, member)

    def adopt_downgraded(self, group: ClassicGroup, reason: str, *, rebalance: bool = True) -> None:
        """A consumer group became this classic group (Stable, its members' assignments from the consumer
        group's target): kept and written, its members' sessions started, and (with `rebalance`) a rebalance
        begun, which its members see at their next heartbeat."""
        self.groups[group.group_id] = group
        self._fx.records.append(new_group_metadata_record(group, group.group_assignment()))
        for member in group.all_members():
            self._reschedule_heartbeat(group, member)
        if rebalance:
            self._prepare_rebalance(group, reason)

    def settings_changed(self, group_id: str) -> None:
        """Windows that run move to the group's new values (a window set to 0 ends now)."""
        group = self.groups.get(group_id)
        if group is None:
            return
        self._schedule_registration_end(group)
        self._schedule_expansion_end(group)

    def replay_group_offline(self, group_id: str, value: GroupOfflineValue | None) -> None:
        """A GroupOffline record of the log being loaded: applied to the loaded members in on_loaded."""
        if value is None:
            self.loaded_offline.pop(group_id, None)
        else:
            self.loaded_offline[group_id] = dict(value.members)

    def replay_group_metadata(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        """A GroupMetadata record of the log being loaded: the group as Stable with its members and
        assignments, or Empty; a tombstone removes it."""
        if value is None:
            self.groups.pop(key.group, None)
            return
        protocol_type = value.protocol_type or None
        group = ClassicGroup(
            key.group,
            STABLE if value.members else EMPTY,
            current_state_timestamp_ms=value.current_state_timestamp_ms,
            generation_id=value.generation,
            protocol_type=protocol_type,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            group.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.session_timeout_ms
                    if m.rebalance_timeout_ms == -1
                    else m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=((value.protocol or "", m.subscription),),
                    assignment=m.assignment,
                    # The assignment was stored when it was handed out: under the pause state of that point
                    # of the log (a pause recorded after it is not in the members' hands yet).
                    delivered_pause=self.pauses.state(key.group),
                )
            )
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[key.group] = group

    def on_loaded(self) -> None:
        """The log is loaded: session timers start for every loaded member, static members offline before the
        restart are offline again with the time their registration window has left; groups over group.max.size
        (the setting may have shrunk), and groups whose pause state changed after their assignments were handed
        out, rebalance."""
        for group in list(self.groups.values()):
            for member in group.all_members():
                self._reschedule_heartbeat(group, member)
            if self.listeners:
                self._emit(
                    GroupLoaded(
                        group.group_id,
                        group.generation_id,
                        str(group.state),
                        self._members_info(group),
                        self.clock.wall_ms(),
                        self.clock.monotonic_ms(),
                    )
                )
            marks = self.loaded_offline.pop(group.group_id, None)
            if marks:
                self._restore_offline_marks(group, marks)
            if group.num_members() > self.settings.group_max_size:
                self._prepare_rebalance(
                    group,
                    f"freshly loaded group {group.group_id} (size "
                    f"{group.num_members()}) is over capacity "
                    f"{self.settings.group_max_size}",
                )
            elif self.pauses.unsynced(group) and group.uses_consumer_protocol():
                # A pause or resume was recorded after the assignments now loaded were handed out: the
                # members do not have it yet, and they will not rejoin on their own.
                self._prepare_rebalance(
                    group,
                    "a pause or resume recorded before the restart is not in the members' assignments yet",
                    RebalanceTrigger(RebalanceReason.PAUSE),
                )
        self.loaded_offline.clear()  # marks of groups that are gone

    def on_unloaded(self) -> None:
        """The shard is going away: parked requests are answered NOT_COORDINATOR, timers are cancelled."""
        for group in list(self.groups.values()):
            for member in group.all_members():
                self._answer_join(group, member, error=ErrorCode.not_coordinator, member_id=member.member_id)
                self._answer_sync(group, member, error=ErrorCode.not_coordinator)
            for joiner in group.expansion_joiners.values():
                self._answer_parked_joiner(joiner, ErrorCode.not_coordinator)
            group.expansion_joiners.clear()
            self.remove_group(group)
        self.groups.clear()


def _inconsistent(request_value: str | None, group_value: str | None) -> bool:
    return request_value is not None and group_value is not None and request_value != group_value


def _member_response(member_id: str, group_instance_id: str | None, error: ErrorCode) -> dict[str, Any]:
    return {"member_id": member_id, "group_instance_id": group_instance_id, "error_code": error}
