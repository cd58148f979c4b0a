"""The lifecycle every classic group API drives: rebalance phases, session and sync expiry, the delivery of
assignments, and the actions of the membership windows (coordinator.group.windows). `GroupMetadataManager`
(coordinator.group.manager) adds the API handlers on top; the module doc there is the theory of operation.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.clock import Clock, Timer, join_key, session_timeout_key, sync_key
from coordinator.records import new_group_metadata_record, new_group_offline_record
from coordinator.result import CoordinatorResult
from protocol.build import ms
from protocol.errors import ErrorCode

from .effects import Calls, Effects
from .events import (
    GroupEvent,
    GroupEventListener,
    GroupRemoved,
    JoinPhaseCompleted,
    MemberFenced,
    MemberInfo,
    MemberRemoved,
    RebalanceReason,
    RebalanceStarted,
    RebalanceTrigger,
    RemovalCause,
)
from .group import ClassicGroup, ClassicGroupMember, Parked, Protocols
from .pause import PauseRegistry
from .responses import UNKNOWN_MEMBER_ID, join_response, sync_response
from .settings import EXPANSION_TIMEOUT, REGISTRATION_TIMEOUT, GroupCoordinatorSettings, GroupSettingsRegistry
from .state import ClassicGroupState
from .windows import expansion_end_ms, expansion_key, registration_end_ms, registration_key

log = logging.getLogger(__name__)

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


@dataclasses.dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    client_id: str
    client_host: str
    reason: str | None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


def join_timeouts(api_version: int, request: Any) -> tuple[int, int]:
    """A JoinGroup's session and rebalance timeouts (ms): v0 has no rebalance timeout, and KIP-62's rebalance
    timeout falls back to the session timeout."""
    session_timeout_ms = ms(request.session_timeout)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)  # v1+
    rebalance_timeout_ms = -1 if rebalance_timeout is None else ms(rebalance_timeout)
    if api_version == 0 or rebalance_timeout_ms == -1:
        rebalance_timeout_ms = session_timeout_ms
    return session_timeout_ms, rebalance_timeout_ms


def new_member(member_id: str, join: JoinRequest, **extra: Any) -> ClassicGroupMember:
    """A member as a JoinGroup describes it (new: it has not been through a rebalance yet)."""
    return ClassicGroupMember(
        member_id=member_id,
        group_instance_id=join.group_instance_id,
        client_id=join.client_id,
        client_host=join.client_host,
        rebalance_timeout_ms=join.rebalance_timeout_ms,
        session_timeout_ms=join.session_timeout_ms,
        protocol_type=join.protocol_type,
        protocols=join.protocols,
        is_new=True,
        **extra,
    )


class ClassicRebalancing:
    """The classic groups of one shard and what happens to them between requests (see the module doc)."""

    def __init__(
        self,
        calls: Calls,
        clock: Clock,
        timer: Timer,
        settings: GroupCoordinatorSettings,
        pauses: PauseRegistry,
        group_settings: GroupSettingsRegistry,
        *,
        new_uuid: Callable[[], str] | None = None,
    ) -> None:
        """`calls` is shared with the shard and the offsets manager; `pauses` and `group_settings` are the shard's
        registries (paused partitions are withheld from assignments, windows read per-group values).
        `new_uuid` makes member ids predictable in tests."""
        self.calls = calls
        self.clock = clock
        self.timer = timer
        self.settings = settings
        self.pauses = pauses
        self.group_settings = group_settings
        self._new_uuid = new_uuid or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ClassicGroup] = {}
        # GroupOffline records read while loading: group -> member id -> offline since (wall ms); applied when
        # the log is loaded (coordinator.group.manager.on_loaded).
        self.loaded_offline: dict[str, dict[str, int]] = {}

    # ========================================================================================================
    # Events for observers (coordinator.group.events): rebalances, removals, fencing
    # ========================================================================================================

    @property
    def listeners(self) -> list[GroupEventListener]:
        return self.calls.listeners

    def _emit(self, event: GroupEvent) -> None:
        self.calls.emit(event)

    @staticmethod
    def _member_info(member: ClassicGroupMember) -> MemberInfo:
        return MemberInfo(member.member_id, member.group_instance_id, member.client_id, member.client_host)

    def _members_info(self, group: ClassicGroup) -> tuple[MemberInfo, ...]:
        return tuple(self._member_info(m) for m in group.all_members())

    def _emit_removed(self, group: ClassicGroup, member: MemberInfo, cause: RemovalCause) -> None:
        if self.listeners:
            self._emit(
                MemberRemoved(
                    group.group_id,
                    member,
                    cause,
                    group.generation_id,
                    self.clock.wall_ms(),
                    self.clock.monotonic_ms(),
                )
            )

    def emit_fenced(
        self, group: ClassicGroup, member_id: str, group_instance_id: str | None, api: str
    ) -> None:
        holder = group.static_member_id(group_instance_id) if group_instance_id is not None else None
        log.info(
            "member %s of group %s fenced on %s: instance id %s belongs to member %s",
            member_id,
            group.group_id,
            api,
            group_instance_id,
            holder,
        )
        if self.listeners:
            self._emit(
                MemberFenced(group.group_id, group_instance_id, member_id, holder, api, self.clock.wall_ms())
            )

    # ========================================================================================================
    # Plumbing: effects, answers, timers
    # ========================================================================================================

    @property
    def _fx(self) -> Effects:
        return self.calls.fx

    def _respond(self, token: object, response: Any) -> None:
        self.calls.respond(token, response)

    def _op(self, method: Callable[..., None], *args: Any) -> Callable[[], CoordinatorResult]:
        """A timer operation: `method(*args)` as its own call into the state machine."""
        return self.calls.op(method, *args)

    def _now_ms(self) -> int:
        return self.clock.wall_ms()

    def _join_error(self, parked: Parked, error: ErrorCode, member_id: str = UNKNOWN_MEMBER_ID) -> None:
        self._respond(parked.token, join_response(parked.api_version, error=error, member_id=member_id))

    def _answer_join(self, group: ClassicGroup, member: ClassicGroupMember, **fields: Any) -> bool:
        """Answer the member's parked JoinGroup, if it has one."""
        parked = group.take_join(member)
        if parked is None:
            return False
        self._respond(parked.token, join_response(parked.api_version, **fields))
        return True

    def _answer_sync(self, group: ClassicGroup, member: ClassicGroupMember, **fields: Any) -> bool:
        parked = group.take_sync(member)
        if parked is None:
            return False
        self._respond(parked.token, sync_response(**fields))
        return True

    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, timeout_ms: int | None = None
    ) -> None:
        timer = member.session_timer
        if timer is None or timer[0] is not group.group_id or timer[1] is not member.member_id:
            timer = member.session_timer = (
                group.group_id,
                member.member_id,
                session_timeout_key(group.group_id, member.member_id),
                self._op(self._expire_heartbeat, group.group_id, member.member_id),
            )
        self.timer.schedule(
            timer[2], member.session_timeout_ms if timeout_ms is None else timeout_ms, timer[3]
        )

    def create_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, EMPTY, current_state_timestamp_ms=self._now_ms())
        self.groups[group_id] = group
        return group

    def remove_group(self, group: ClassicGroup) -> None:
        """Forget a group (deleted): it reads as Dead from now on."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            if self.listeners:
                self._emit(GroupRemoved(group.group_id, self.clock.wall_ms()))
        self.timer.cancel(join_key(group.group_id))
        self.timer.cancel(sync_key(group.group_id))
        self.timer.cancel(registration_key(group.group_id))
        self.timer.cancel(expansion_key(group.group_id))
        for member_id in (
            group.all_member_ids() + group.pending_join_members() + list(group.expansion_joiners)
        ):
            self.timer.cancel(session_timeout_key(group.group_id, member_id))

    def _generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{self._new_uuid()}"

    # -- rebalancing -----------------------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(
        self, group: ClassicGroup, reason: str, trigger: RebalanceTrigger | None = None
    ) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason, trigger)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(
        self, group: ClassicGroup, reason: str, trigger: RebalanceTrigger | None = None
    ) -> None:
        """`trigger` says which category of rebalance this is, for observers (COORDINATOR when not given)."""
        self._admit_joiners(group)
        if group.is_in_state(COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin.
            self._reset_and_propagate_assignment_with_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        is_initial_rebalance = group.is_in_state(EMPTY)
        if is_initial_rebalance:
            # KIP-134: give the other members of a starting group time to join.
            delay_ms = self.settings.group_initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self.timer.schedule(
                join_key(group.group_id),
                delay_ms,
                self._op(
                    self._try_complete_initial_rebalance_else_schedule, group.group_id, delay_ms, remaining_ms
                ),
            )
        previous_state = group.state
        group.transition_to(PREPARING_REBALANCE, self._now_ms())
        log.info(
            "preparing to rebalance group %s with old generation %d (reason: %s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        if self.listeners:
            trigger = trigger or RebalanceTrigger(RebalanceReason.COORDINATOR)
            self._emit(
                RebalanceStarted(
                    group.group_id,
                    group.generation_id,
                    str(previous_state),
                    trigger.reason,
                    trigger.member,
                    trigger.client_reason,
                    reason,
                    group.num_members(),
                    self.clock.wall_ms(),
                    self.clock.monotonic_ms(),
                )
            )
        if not is_initial_rebalance:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            self.timer.schedule(
                join_key(group.group_id),
                group.rebalance_timeout_ms(),
                self._op(self._complete_join_by_id, group.group_id),
            )

    def _try_complete_initial_rebalance_else_schedule(
        self, group_id: str, delay_ms: int, remaining_ms: int
    ) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay_ms = min(self.settings.group_initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self.timer.schedule(
                join_key(group_id),
                new_delay_ms,
                self._op(
                    self._try_complete_initial_rebalance_else_schedule,
                    group_id,
                    new_delay_ms,
                    new_remaining_ms,
                ),
            )
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        """Complete the join phase now if everyone is in — never during the initial rebalance, which waits for
        its delay."""
        if (
            group.is_in_state(PREPARING_REBALANCE)
            and group.previous_state is not EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin (static members stay until their
        session expires), start the next generation, answer every waiting JoinGroup and wait for SyncGroup."""
        self.timer.cancel(join_key(group.group_id))
        not_rejoined = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        for member in not_rejoined:
            self._emit_removed(group, self._member_info(member), RemovalCause.REBALANCE_TIMEOUT)
            self._drop_member(group, member.member_id, ErrorCode.unknown_member_id)
            self.timer.cancel(session_timeout_key(group.group_id, member.member_id))
        if not_rejoined:
            log.info(
                "group %s removed dynamic members that did not rejoin: %s",
                group.group_id,
                [m.member_id for m in not_rejoined],
            )

        if group.is_in_state(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.num_members() > 0:
            # Nobody rejoined: wait another rebalance timeout for the session timeouts to clear the group.
            log.warning(
                "group %s could not complete its rebalance because no member rejoined", group.group_id
            )
            self.timer.schedule(
                join_key(group.group_id),
                group.rebalance_timeout_ms(),
                self._op(self._complete_join_by_id, group.group_id),
            )
            return

        group.init_next_generation(self._now_ms())
        if self.listeners:
            self._emit(
                JoinPhaseCompleted(
                    group.group_id,
                    group.generation_id,
                    str(group.state),
                    group.leader_id,
                    group.protocol_name,
                    self._members_info(group),
                    self.clock.wall_ms(),
                    self.clock.monotonic_ms(),
                )
            )
        if group.is_in_state(EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._fx.records.append(new_group_metadata_record(group, {}))
            return

        log.info(
            "stabilized group %s generation %d with %d members",
            group.group_id,
            group.generation_id,
            group.num_members(),
        )
        for member in group.all_members():
            is_leader = group.is_leader(member.member_id)
            self._answer_join(
                group,
                member,
                member_id=member.member_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader_id,
                members=group.join_response_members() if is_leader else (),
            )
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            if not member.is_offline:  # an offline member is covered by its registration window
                group.add_pending_sync_member(member.member_id)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        self.timer.schedule(
            sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            self._op(self._expire_pending_sync, group.group_id, group.generation_id),
        )

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.clear_pending_sync_members()
        self.timer.cancel(sync_key(group.group_id))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.state not in (COMPLETING_REBALANCE, STABLE) or group.has_received_sync_from_all_members():
            return
        pending = group.pending_sync_members()
        first: MemberInfo | None = None
        for member_id in pending:
            info = self._member_info(group.member(member_id))
            first = first or info
            self._emit_removed(group, info, RemovalCause.SYNC_TIMEOUT)
            self._drop_member(group, member_id, ErrorCode.unknown_member_id)
            self.timer.cancel(session_timeout_key(group_id, member_id))
        log.info("group %s removed members that did not send SyncGroup in time: %s", group_id, pending)
        self._prepare_rebalance(
            group,
            f"removing {pending} on pending sync request expiration",
            RebalanceTrigger(RebalanceReason.REBALANCE_TIMEOUT, first),
        )

    # -- session expiry --------------------------------------------------------------------------------------

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in_state(DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("pending member %s of group %s expired", member_id, group_id)
            self._emit_removed(group, MemberInfo(member_id), RemovalCause.PENDING_MEMBER_TIMEOUT)
            group.remove(member_id)
            if group.is_in_state(PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        if member_id in group.expansion_joiners:
            joiner = group.expansion_joiners.pop(member_id)
            log.info("held-back joiner %s of group %s timed out", member_id, group_id)
            self._emit_removed(group, self._member_info(joiner), RemovalCause.NEW_MEMBER_TIMEOUT)
            self._answer_parked_joiner(joiner, ErrorCode.unknown_member_id)
            self._schedule_expansion_end(group)
            return
        if not group.has_member(member_id):
            return
        member = group.member(member_id)
        if member.is_offline:
            return  # its registration window runs: the registration timer removes it
        if (
            not member.has_satisfied_heartbeat()
            and member.is_static
            and not member.is_new
            and self.group_settings.value(group_id, REGISTRATION_TIMEOUT) > 0
        ):
            group.mark_offline(member, self.clock.monotonic_ms())
            self._write_offline_marks(group)
            log.info(
                "static member %s (%s) of group %s failed its session timeout; it keeps its place for its "
                "registration window",
                member.group_instance_id,
                member_id,
                group_id,
            )
            self._schedule_registration_end(group)
            self._maybe_complete_join_phase(group)
            return
        if not member.has_satisfied_heartbeat():
            log.info("member %s of group %s failed its session timeout; removing it", member_id, group_id)
            info = self._member_info(member)
            cause = RemovalCause.NEW_MEMBER_TIMEOUT if member.is_new else RemovalCause.SESSION_TIMEOUT
            self._emit_removed(group, info, cause)
            self._remove_member_and_update_group(
                group,
                member,
                f"removing member {member_id} on heartbeat expiration",
                RebalanceTrigger(RebalanceReason.SESSION_EXPIRY, info),
            )

    def _remove_member_and_update_group(
        self,
        group: ClassicGroup,
        member: ClassicGroupMember,
        reason: str,
        trigger: RebalanceTrigger | None = None,
    ) -> None:
        # A new member may time out while its JoinGroup waits: UNKNOWN_MEMBER_ID makes it join again.
        self._drop_member(group, member.member_id, ErrorCode.unknown_member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason, trigger)
        elif group.is_in_state(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _drop_member(self, group: ClassicGroup, member_id: str, error: ErrorCode) -> None:
        """Remove a member (or pending member id), answering whatever it still has parked."""
        if group.has_member(member_id):
            member = group.member(member_id)
            self._answer_join(group, member, error=error)
            self._answer_sync(group, member, error=error)
        group.remove(member_id)

    # -- assignment ------------------------------------------------------------------------------------------

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        if not group.is_in_state(COMPLETING_REBALANCE):
            raise RuntimeError(f"group {group.group_id} must be CompletingRebalance, not {group.state}")
        for member in group.all_members():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(
        self, group: ClassicGroup, assignment: Mapping[str, bytes]
    ) -> list[object]:
        if not group.is_in_state(COMPLETING_REBALANCE):
            raise RuntimeError(f"group {group.group_id} must be CompletingRebalance, not {group.state}")
        for member in group.all_members():
            member.assignment = assignment.get(member.member_id, b"")
        return self._propagate_assignment(group, ErrorCode.none)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> list[object]:
        """Answer every parked SyncGroup; returns the tokens answered."""
        ok = error == ErrorCode.none
        answered = []
        for member in group.all_members():
            parked = member.awaiting_sync
            if parked is None:
                continue
            if self._answer_sync(
                group,
                member,
                error=error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=self.pauses.deliver(group, member)
                if ok
                else self.pauses.deliverable(group, member.assignment),
            ):
                answered.append(parked.token)
                # The session timer may have fired (and been ignored) while the member waited: restart it.
                self._reschedule_heartbeat(group, member)
        return answered

    # ========================================================================================================
    # Static membership windows (coordinator.group.windows says what they are)
    # ========================================================================================================

    def _mark_online(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        if member.offline_since_ms is not None:
            offline_ms = self.clock.monotonic_ms() - member.offline_since_ms
            group.mark_online(member)
            self._write_offline_marks(group)
            log.info(
                "static member %s (%s) of group %s is back after %d ms offline",
                member.group_instance_id,
                member.member_id,
                group.group_id,
                offline_ms,
            )
            self._reschedule_heartbeat(group, member)  # its session timer fired and was not renewed
            self._schedule_registration_end(group)

    def _write_offline_marks(self, group: ClassicGroup) -> None:
        """The group's offline static members and since when, as a GroupOffline record: a coordinator restart
        keeps their places and the time their registration windows have left."""
        now_mono, now_wall = self.clock.monotonic_ms(), self.clock.wall_ms()
        since = {
            m.member_id: now_wall - (now_mono - m.offline_since_ms)
            for m in group.offline_members()
            if m.offline_since_ms is not None
        }
        self._fx.records.append(new_group_offline_record(group.group_id, since))

    def _restore_offline_marks(self, group: ClassicGroup, marks: dict[str, int]) -> None:
        """Marks read from the log (wall-clock ms) on the members loaded with the group."""
        now_mono, now_wall = self.clock.monotonic_ms(), self.clock.wall_ms()
        for member_id, since_wall_ms in marks.items():
            if group.has_member(member_id) and group.member(member_id).is_static:
                offline_for_ms = max(0, now_wall - since_wall_ms)
                group.mark_offline(group.member(member_id), now_mono - offline_for_ms)
        if group.offline_members():
            log.info(
                "group %s: static members %s are offline, inside their registration window",
                group.group_id,
                [m.group_instance_id for m in group.offline_members()],
            )
            self._schedule_registration_end(group)

    def _schedule_registration_end(self, group: ClassicGroup) -> None:
        offline = group.offline_members()
        key = registration_key(group.group_id)
        if not offline:
            self.timer.cancel(key)
            return
        end_ms = registration_end_ms(
            (m.offline_since_ms for m in offline if m.offline_since_ms is not None),
            self.group_settings.value(group.group_id, REGISTRATION_TIMEOUT),
        )
        delay_ms = max(end_ms - self.clock.monotonic_ms(), 0)
        self.timer.schedule(key, delay_ms, self._op(self._end_registration_window, group.group_id))

    def _end_registration_window(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in_state(DEAD):
            return
        offline = group.offline_members()
        if not offline:
            return
        end_ms = registration_end_ms(
            (m.offline_since_ms for m in offline if m.offline_since_ms is not None),
            self.group_settings.value(group_id, REGISTRATION_TIMEOUT),
        )
        if end_ms > self.clock.monotonic_ms():
            self._schedule_registration_end(group)  # the window grew meanwhile
            return
        first: MemberInfo | None = None
        for member in offline:
            info = self._member_info(member)
            first = first or info
            self._emit_removed(group, info, RemovalCause.SESSION_TIMEOUT)
            self._drop_member(group, member.member_id, ErrorCode.unknown_member_id)
            self.timer.cancel(session_timeout_key(group_id, member.member_id))
        removed = [m.group_instance_id for m in offline]
        self._write_offline_marks(group)
        log.info("group %s: registration window ended; removing offline static members %s", group_id, removed)
        reason = f"removing offline static members {removed} at the end of their registration window"
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(
                group, reason, RebalanceTrigger(RebalanceReason.SESSION_EXPIRY, first)
            )
        elif group.is_in_state(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _hold_joiner(self, parked: Parked, join: JoinRequest, group: ClassicGroup, member_id: str) -> None:
        if join.group_instance_id is not None:
            for other in list(group.expansion_joiners.values()):
                if other.group_instance_id == join.group_instance_id:
                    # The same static instance joined again (it restarted): the newer one takes the place.
                    self.emit_fenced(group, other.member_id, other.group_instance_id, "JoinGroup")
                    del group.expansion_joiners[other.member_id]
                    self.timer.cancel(session_timeout_key(group.group_id, other.member_id))
                    self._answer_parked_joiner(other, ErrorCode.fenced_instance_id)
        member = new_member(member_id, join, awaiting_join=parked, joined_at_ms=self.clock.monotonic_ms())
        group.remove_pending_member(member_id)
        first = not group.expansion_joiners
        group.expansion_joiners[member_id] = member
        if first:
            group.expansion_opened_ms = self.clock.monotonic_ms()
        self._reschedule_heartbeat(group, member, self.settings.group_new_member_join_timeout_ms)
        log.info(
            "group %s: new member %s (instance %s) held back by the expansion window (%d waiting)",
            group.group_id,
            member_id,
            join.group_instance_id,
            len(group.expansion_joiners),
        )
        self._schedule_expansion_end(group)

    def _schedule_expansion_end(self, group: ClassicGroup) -> None:
        key = expansion_key(group.group_id)
        if not group.expansion_joiners:
            self.timer.cancel(key)
            return
        end_ms = expansion_end_ms(
            group.expansion_opened_ms,
            self.group_settings.value(group.group_id, EXPANSION_TIMEOUT),
            ((j.joined_at_ms, j.rebalance_timeout_ms) for j in group.expansion_joiners.values()),
        )
        delay_ms = max(end_ms - self.clock.monotonic_ms(), 0)
        self.timer.schedule(key, delay_ms, self._op(self._end_expansion_window, group.group_id))

    def _end_expansion_window(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.expansion_joiners:
            return
        if not group.is_in_state(STABLE):
            # Cannot happen (any rebalance admits the joiners); answered rather than left waiting.
            for joiner in group.expansion_joiners.values():
                self._answer_parked_joiner(joiner, ErrorCode.rebalance_in_progress)
            group.expansion_joiners.clear()
            return
        joiners = list(group.expansion_joiners.values())
        self._prepare_rebalance(
            group,
            f"admitting {len(joiners)} new members {[m.member_id for m in joiners]} at the end of the expansion "
            "window",
            RebalanceTrigger(RebalanceReason.NEW_MEMBER, self._member_info(joiners[0])),
        )

    def _admit_joiners(self, group: ClassicGroup) -> None:
        """A rebalance starts: the held-back joiners become members, waiting in JoinGroup like any joiner."""
        if not group.expansion_joiners:
            return
        self.timer.cancel(expansion_key(group.group_id))
        joiners = list(group.expansion_joiners.values())
        group.expansion_joiners.clear()
        for joiner in joiners:
            parked = joiner.awaiting_join
            joiner.awaiting_join = None
            if (
                group.has_member(joiner.member_id)
                or (
                    joiner.group_instance_id is not None and group.has_static_member(joiner.group_instance_id)
                )
                or not group.supports_protocols(joiner.protocol_type, joiner.protocol_names())
            ):
                if parked is not None:
                    self._join_error(parked, ErrorCode.inconsistent_group_protocol, joiner.member_id)
                self.timer.cancel(session_timeout_key(group.group_id, joiner.member_id))
                continue
            group.add(joiner, parked)

    def _answer_parked_joiner(self, joiner: ClassicGroupMember, error: ErrorCode) -> None:
        parked = joiner.awaiting_join
        joiner.awaiting_join = None
        if parked is not None:
            self._join_error(parked, error, joiner.member_id)
