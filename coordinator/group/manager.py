"""The classic group coordinator of one shard (Kafka's GroupCoordinatorShard and GroupMetadataManager).

Theory of operation
-------------------
One `GroupMetadataManager` holds every group of a shard and the shard's committed offsets. It is a pure state
machine: it never reads the system clock, never sleeps and does no I/O. Each API method takes an opaque
`token` (the runtime's handle on the request), the request's `api_version` and the kio request entity (any
version: fields are read with the names that version has), and returns a `CoordinatorResult`:

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

Observers register with `add_listener` and are told, synchronously and with this clock's timestamps, when a
rebalance starts (with its reason category: each code path that calls `_prepare_rebalance` names one), when its
join phase ends and when the group becomes Stable, when a member is removed and why, when a request is fenced,
and when offsets are written (coordinator.observability.events). Listeners observe; they change nothing here.

Durable state and replay
------------------------
`replay(record)` is the only code that changes committed offsets: OffsetCommit records (and tombstones) are
applied when the runtime replays them after they are durable, and while it loads the log at start. Classic
groups follow Kafka: the handlers change the in-memory group at once and write a GroupMetadata record at the
points Kafka does (a new group, a join phase that ends Empty, the leader's SyncGroup, a static member replaced
in place). Kafka does not replay these records while serving (`replayRecords = false`), because the group in
memory is already that state or newer; likewise `replay` skips every GroupMetadata record this coordinator
wrote itself (it counts them until they come back), whenever the runtime replays it. Any other GroupMetadata
record comes from the log being loaded: it recreates the group as Stable with its members and assignments, or
Empty; a tombstone removes it. `on_loaded()`, called once the log is loaded, re-arms every member's session
timer and rebalances groups over group.max.size. Group deletion (DeleteGroups, offset retention) removes the
group from memory in the handler and writes the tombstone.

What Kafka applies only once the write succeeds (the leader's assignment, the static member's new id) is
applied here at once, and undone by `on_append_failure` if the write fails: the answers then carry the error,
a failed assignment rebalances the group, a failed static replacement gives the member its old id back.

Our own records (coordinator.records: GroupPause, GroupSettings) follow the GroupMetadata rule: the admin
handler (pause_group, resume_group, set_group_settings) applies them at once and undoes them if the append
fails; replay applies them only while the log loads. Two volatile additions ride on the classic state: static
members marked offline inside their registration window, and joiners held back by an expansion window (see
"Static membership windows" below); neither is written to the log.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec

from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
from kio.schema.describe_groups.v6.response import DescribeGroupsResponse
from kio.schema.list_groups.v5.response import ListGroupsResponse

from coordinator.clock import Clock, Timer, join_key, session_timeout_key, sync_key
from coordinator.observability.events import (
    GroupEvent,
    GroupEventListener,
    GroupLoaded,
    GroupRemoved,
    JoinPhaseCompleted,
    MemberFenced,
    MemberInfo,
    MemberRemoved,
    OffsetsWritten,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceStarted,
    RebalanceTrigger,
    RemovalCause,
    StaticMemberReplaced,
    leave_cause,
    leave_reason,
)
from coordinator.offsets.manager import OffsetMetadataManager
from coordinator.records import (
    CoordinatorRecord,
    CoordinatorResult,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupPauseKey,
    GroupPauseValue,
    GroupSettingsKey,
    GroupSettingsValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordType,
    decode_record,
    encode_key,
    new_empty_group_metadata_record,
    new_group_metadata_record,
    new_group_metadata_tombstone,
    new_group_pause_record,
    new_group_settings_record,
    simple_offset_commit,
)
from protocol.build import build, ms
from protocol.consumer import filter_assignment
from protocol.errors import ErrorCode

from .group import ClassicGroup, ClassicGroupMember, Parked, Protocols
from .responses import UNKNOWN_MEMBER_ID, heartbeat_response, join_response, leave_response, sync_response
from .state import ClassicGroupState

log = logging.getLogger(__name__)

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD

CLASSIC_GROUP_TYPE = "classic"
GROUP_METADATA_KEY_PREFIX = encode_key(GroupMetadataKey(""))[:2]
GROUP_PAUSE_KEY_PREFIX = encode_key(GroupPauseKey(""))[:2]
GROUP_SETTINGS_KEY_PREFIX = encode_key(GroupSettingsKey(""))[:2]
_APPLIED_IN_MEMORY_PREFIXES = frozenset({GROUP_METADATA_KEY_PREFIX, GROUP_PAUSE_KEY_PREFIX, GROUP_SETTINGS_KEY_PREFIX})
OFFSET_COMMIT_KEY_PREFIX = encode_key(OffsetCommitKey("", "", 0))[:2]
DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED = -2147483648


@dataclasses.dataclass(frozen=True)
class GroupCoordinatorSettings:
    """Kafka's broker settings for classic groups and offsets, with Kafka's defaults."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    group_new_member_join_timeout_ms: int = 5 * 60 * 1000  # not a broker setting in Kafka either
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # Ours, off (0) by default; per-group values override them (set_group_settings, see "windows" below).
    group_static_registration_timeout_ms: int = 0
    group_expansion_timeout_ms: int = 0

    _KAFKA_NAMES = {
        "group.min.session.timeout.ms": "group_min_session_timeout_ms",
        "group.max.session.timeout.ms": "group_max_session_timeout_ms",
        "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
        "group.max.size": "group_max_size",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
        "group.static.registration.timeout.ms": "group_static_registration_timeout_ms",
        "group.expansion.timeout.ms": "group_expansion_timeout_ms",
    }

    @classmethod
    def from_config(cls, config: Any) -> GroupCoordinatorSettings:
        """From anything indexed by Kafka's names (coordinator.config.Config, a dict of properties)."""
        values: dict[str, int] = {}
        for kafka_name, field in cls._KAFKA_NAMES.items():
            try:
                values[field] = int(config[kafka_name])
            except KeyError:
                pass
        try:
            values["offsets_retention_ms"] = int(config["offsets.retention.minutes"]) * 60 * 1000
        except KeyError:
            pass
        return cls(**values)


REGISTRATION_TIMEOUT = "group.static.registration.timeout.ms"
EXPANSION_TIMEOUT = "group.expansion.timeout.ms"
PER_GROUP_SETTINGS = {
    REGISTRATION_TIMEOUT: "group_static_registration_timeout_ms",
    EXPANSION_TIMEOUT: "group_expansion_timeout_ms",
}
"""The settings a group may override (set_group_settings): config name -> GroupCoordinatorSettings field."""
MAX_SETTING_VALUE = 2**31 - 1


def registration_key(group_id: str) -> str:
    """The end of a group's static registration window: offline static members are removed then."""
    return f"registration-{group_id}"


def expansion_key(group_id: str) -> str:
    """The end of a group's expansion window: the held-back joiners are admitted in one rebalance."""
    return f"expansion-{group_id}"


@dataclasses.dataclass(frozen=True, slots=True)
class PauseState:
    """What is paused in a group: everything (`group_paused`) and/or the partitions of `topics`."""

    group_paused: bool = False
    topics: frozenset[str] = frozenset()

    def withholds(self, topic: str) -> bool:
        return self.group_paused or topic in self.topics

    @property
    def is_paused(self) -> bool:
        return self.group_paused or bool(self.topics)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group_paused, "topics": sorted(self.topics)}


NOT_PAUSED = PauseState()


@dataclasses.dataclass(frozen=True, slots=True)
class AdminAnswer:
    """The answer of an admin operation on a group (pause, resume, settings): NONE or an error, a message for
    people, and the resulting state."""

    error: ErrorCode = ErrorCode.none
    message: str = ""
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class _JoinRequest:
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


FailureHook = Callable[[ErrorCode], dict[object, Any]]
"""Undo in-memory changes of a result whose append failed; returns replacement answers by token."""


def _new_member(member_id: str, join: _JoinRequest, **extra: Any) -> ClassicGroupMember:
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


@dataclasses.dataclass(slots=True)
class _Effects:
    """What one call into the state machine produces."""

    records: list[CoordinatorRecord] = dataclasses.field(default_factory=list)
    responses: list[tuple[object, Any]] = dataclasses.field(default_factory=list)
    failure_hooks: list[FailureHook] = dataclasses.field(default_factory=list)
    own_token: object = None
    own_error: Callable[[ErrorCode], Any] | None = None  # the request's own answer when its write fails


P = ParamSpec("P")


def _entry(method: Callable[Concatenate[GroupMetadataManager, P], None]
           ) -> Callable[Concatenate[GroupMetadataManager, P], CoordinatorResult]:
    """Run a method as one call into the state machine; collect what it produced into a CoordinatorResult."""

    @functools.wraps(method)
    def wrapper(self: GroupMetadataManager, *args: P.args, **kwargs: P.kwargs) -> CoordinatorResult:
        if self._effects is not None:
            raise RuntimeError("the group coordinator is not re-entrant")
        self._effects = effects = _Effects()
        try:
            method(self, *args, **kwargs)
        finally:
            self._effects = None
        return self._to_result(effects)

    return wrapper  # type: ignore[return-value]  # functools.wraps hides the new return type from mypy


class GroupMetadataManager:
    def __init__(
        self,
        clock: Clock,
        timer: Timer,
        settings: GroupCoordinatorSettings | Mapping[str, Any] | Any = None,
        *,
        new_uuid: Callable[[], str] | None = None,
        **overrides: int,
    ) -> None:
        """`settings` is a GroupCoordinatorSettings, or anything indexed by Kafka's names
        (coordinator.config.Config); keyword overrides use the Python names
        (`group_initial_rebalance_delay_ms=0`). `new_uuid` makes member ids predictable in tests."""
        if settings is None:
            settings = GroupCoordinatorSettings()
        elif not isinstance(settings, GroupCoordinatorSettings):
            settings = GroupCoordinatorSettings.from_config(settings)
        self.settings = dataclasses.replace(settings, **overrides)
        self.clock = clock
        self.timer = timer
        self._new_uuid = new_uuid or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetMetadataManager(
            self,
            clock,
            offset_metadata_max_bytes=self.settings.offset_metadata_max_bytes,
            offsets_retention_ms=self.settings.offsets_retention_ms,
        )
        self._effects: _Effects | None = None
        self._unreplayed: collections.Counter[CoordinatorRecord] = collections.Counter()
        self.listeners: list[GroupEventListener] = []
        # Durable state of our own record types, by group id; a group need not exist to have either.
        self.pauses: dict[str, PauseState] = {}
        self.group_settings: dict[str, dict[str, int]] = {}

    # ========================================================================================================
    # Events for observers (coordinator.observability.events): rebalances, removals, fencing
    # ========================================================================================================

    def add_listener(self, listener: GroupEventListener) -> None:
        """`listener.on_group_event(event)` is called synchronously for every event, with this manager's clock
        in the timestamps; what it raises is logged and ignored."""
        self.listeners.append(listener)

    def _emit(self, event: GroupEvent) -> None:
        for listener in self.listeners:
            try:
                listener.on_group_event(event)
            except Exception:
                log.exception("group event listener %r failed on %r", listener, event)

    @staticmethod
    def _member_info(member: ClassicGroupMember) -> MemberInfo:
        return MemberInfo(member.member_id, member.group_instance_id, member.client_id, member.client_host)

    def _members_info(self, group: ClassicGroup) -> tuple[MemberInfo, ...]:
        return tuple(self._member_info(m) for m in group.all_members())

    def _emit_removed(self, group: ClassicGroup, member: MemberInfo, cause: RemovalCause) -> None:
        if self.listeners:
            self._emit(MemberRemoved(group.group_id, member, cause, group.generation_id, self.clock.wall_ms(),
                                     self.clock.monotonic_ms()))

    def _emit_fenced(
        self, group: ClassicGroup, member_id: str, group_instance_id: str | None, api: str
    ) -> None:
        holder = group.static_member_id(group_instance_id) if group_instance_id is not None else None
        log.info("member %s of group %s fenced on %s: instance id %s belongs to member %s", member_id,
                 group.group_id, api, group_instance_id, holder)
        if self.listeners:
            self._emit(MemberFenced(group.group_id, group_instance_id, member_id, holder, api,
                                    self.clock.wall_ms()))

    # ========================================================================================================
    # Plumbing: effects, answers, timers
    # ========================================================================================================

    @property
    def _fx(self) -> _Effects:
        assert self._effects is not None, "called outside of a state machine call"
        return self._effects

    def _respond(self, token: object, response: Any) -> None:
        self._fx.responses.append((token, response))

    def _to_result(self, effects: _Effects) -> CoordinatorResult:
        result = CoordinatorResult(records=effects.records, responses=effects.responses)
        if effects.records:
            # GroupMetadata records this coordinator writes describe what memory already holds: their replay
            # is skipped (see the module doc). Counted until replayed, or forgotten if the append fails.
            written = [r for r in effects.records if _is_applied_in_memory(r)]
            self._unreplayed.update(written)
            result.on_append_failure = functools.partial(
                self._append_failed,
                written,
                list(effects.responses),
                list(effects.failure_hooks),
                effects.own_token,
                effects.own_error,
            )
        return result

    @_entry
    def _append_failed(
        self,
        written: list[CoordinatorRecord],
        original: list[tuple[object, Any]],
        hooks: list[FailureHook],
        own_token: object,
        own_error: Callable[[ErrorCode], Any] | None,
        error_code: int,
    ) -> None:
        self._unreplayed.subtract(written)
        self._unreplayed = +self._unreplayed  # drop counts that reached zero
        error = ErrorCode(error_code)
        replaced: dict[object, Any] = {}
        for hook in hooks:
            replaced.update(hook(error))
        if own_error is not None and own_token not in replaced and any(t is own_token for t, _ in original):
            replaced[own_token] = own_error(error)
        later = self._fx.responses
        self._fx.responses = [(token, replaced.get(token, response)) for token, response in original] + later

    def _op(self, method: Callable[..., None], *args: Any) -> Callable[[], CoordinatorResult]:
        """A timer operation: `method(*args)` as its own call into the state machine."""
        return functools.partial(self._run_op, method, *args)

    @_entry
    def _run_op(self, method: Callable[..., None], *args: Any) -> None:
        method(*args)

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
        self.timer.schedule(
            session_timeout_key(group.group_id, member.member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            self._op(self._expire_heartbeat, group.group_id, member.member_id),
        )

    def _create_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, EMPTY, current_state_timestamp_ms=self._now_ms())
        self.groups[group_id] = group
        return group

    def _remove_group(self, group: ClassicGroup) -> None:
        """Forget a group (deleted): it reads as Dead from now on."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            if self.listeners:
                self._emit(GroupRemoved(group.group_id, self.clock.wall_ms()))
        self.timer.cancel(join_key(group.group_id))
        self.timer.cancel(sync_key(group.group_id))
        self.timer.cancel(registration_key(group.group_id))
        self.timer.cancel(expansion_key(group.group_id))
        for member_id in group.all_member_ids() + group.pending_join_members() + list(group.expansion_joiners):
            self.timer.cancel(session_timeout_key(group.group_id, member_id))

    def _generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{self._new_uuid()}"

    # ========================================================================================================
    # JoinGroup
    # ========================================================================================================

    @_entry
    def join_group(
        self, token: object, api_version: int, request: Any, *, client_id: str = "", client_host: str = ""
    ) -> None:
        """JoinGroup v0-v9. `client_id` and `client_host` come from the request header and the connection."""
        self._fx.own_token = token
        session_timeout_ms = ms(request.session_timeout)
        rebalance_timeout = getattr(request, "rebalance_timeout", None)  # v1+
        rebalance_timeout_ms = -1 if rebalance_timeout is None else ms(rebalance_timeout)
        if api_version == 0 or rebalance_timeout_ms == -1:
            rebalance_timeout_ms = session_timeout_ms  # KIP-62: v0 has no rebalance timeout
        join = _JoinRequest(
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
        elif not self._session_timeout_allowed(session_timeout_ms):
            self._join_error(parked, ErrorCode.invalid_session_timeout, join.member_id)
        else:
            self._classic_group_join(parked, join)

    def _session_timeout_allowed(self, session_timeout_ms: int) -> bool:
        s = self.settings
        return s.group_min_session_timeout_ms <= session_timeout_ms <= s.group_max_session_timeout_ms

    def _classic_group_join(self, parked: Parked, join: _JoinRequest) -> None:
        is_unknown_member = join.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(join.group_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown_member:
                self._join_error(parked, ErrorCode.unknown_member_id, join.member_id)
                return
            group = self._create_group(join.group_id)

        if not self._accept_joining_member(group, join.member_id, join.group_instance_id):
            if group.has_member(join.member_id):
                self._emit_removed(group, self._member_info(group.member(join.member_id)),
                                   RemovalCause.GROUP_MAX_SIZE)
            self._drop_member(group, join.member_id, ErrorCode.group_max_size_reached)
            self._join_error(parked, ErrorCode.group_max_size_reached)
        elif is_unknown_member:
            self._join_new_member(parked, join, group)
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
            self._remove_group(group)
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

    def _join_new_member(self, parked: Parked, join: _JoinRequest, group: ClassicGroup) -> None:
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

    def _join_existing_member(self, parked: Parked, join: _JoinRequest, group: ClassicGroup) -> None:
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
                self._emit_fenced(group, member_id, join.group_instance_id, "JoinGroup")
            self._join_error(parked, error, member_id)
            return

        member = group.member(member_id)
        self._mark_online(group, member)
        if group.is_in_state(PREPARING_REBALANCE):
            self._update_member_then_rebalance_or_complete_join(
                parked, join, group, member, f"member {member_id} joins during {group.state}",
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
                    parked, join, group, member, f"leader {member_id} rejoins during {group.state}",
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
        self, parked: Parked, join: _JoinRequest, group: ClassicGroup, member_id: str
    ) -> None:
        if group.is_in_state(STABLE) and self._group_setting(group.group_id, EXPANSION_TIMEOUT) > 0:
            self._hold_joiner(parked, join, group, member_id)
            return
        member = _new_member(member_id, join)
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
        join: _JoinRequest,
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
            group, f"{reason}; client reason: {join.reason}",
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
        self, parked: Parked, join: _JoinRequest, group: ClassicGroup, old_member_id: str, new_member_id: str
    ) -> None:
        assert join.group_instance_id is not None
        instance_id = join.group_instance_id
        current_leader = group.leader_id
        new_member = self._replace_static_member(group, instance_id, old_member_id, new_member_id)
        if self.listeners:
            self._emit(StaticMemberReplaced(group.group_id, instance_id, old_member_id, new_member_id,
                                            self.clock.wall_ms()))
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
            self._emit_fenced(group, old_member_id, instance_id, "JoinGroup")
        if old.awaiting_sync is not None:
            self._emit_fenced(group, old_member_id, instance_id, "SyncGroup")
        self._answer_join(group, old, error=ErrorCode.fenced_instance_id, member_id=old_member_id)
        self._answer_sync(group, old, error=ErrorCode.fenced_instance_id)
        new = group.replace_static_member(instance_id, old_member_id, new_member_id)
        if old.is_offline:
            log.info("static member %s of group %s is back after %d ms offline", instance_id, group.group_id,
                     self.clock.monotonic_ms() - (old.offline_since_ms or 0))
            self._schedule_registration_end(group)
        return new

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
            self._emit(RebalanceStarted(
                group.group_id, group.generation_id, str(previous_state), trigger.reason, trigger.member,
                trigger.client_reason, reason, self._members_info(group), self.clock.wall_ms(),
                self.clock.monotonic_ms(),
            ))
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
            self._emit(JoinPhaseCompleted(
                group.group_id, group.generation_id, str(group.state), group.leader_id, group.protocol_name,
                self._members_info(group), self.clock.wall_ms(), self.clock.monotonic_ms(),
            ))
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
        self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration",
                                RebalanceTrigger(RebalanceReason.REBALANCE_TIMEOUT, first))

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
            and self._group_setting(group_id, REGISTRATION_TIMEOUT) > 0
        ):
            group.mark_offline(member, self.clock.monotonic_ms())
            log.info("static member %s (%s) of group %s failed its session timeout; it keeps its place for its "
                     "registration window", member.group_instance_id, member_id, group_id)
            self._schedule_registration_end(group)
            self._maybe_complete_join_phase(group)
            return
        if not member.has_satisfied_heartbeat():
            log.info("member %s of group %s failed its session timeout; removing it", member_id, group_id)
            info = self._member_info(member)
            cause = RemovalCause.NEW_MEMBER_TIMEOUT if member.is_new else RemovalCause.SESSION_TIMEOUT
            self._emit_removed(group, info, cause)
            self._remove_member_and_update_group(
                group, member, f"removing member {member_id} on heartbeat expiration",
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
            if self._answer_sync(
                group,
                member,
                error=error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=self._deliverable(group, member.assignment),
            ):
                assert parked is not None
                answered.append(parked.token)
                # The session timer may have fired (and been ignored) while the member waited: restart it.
                self._reschedule_heartbeat(group, member)
        return answered

    # ========================================================================================================
    # SyncGroup
    # ========================================================================================================

    @_entry
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
                self._emit_fenced(group, member_id, instance_id, "SyncGroup")
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
                    assignment=self._deliverable(group, group.member(member_id).assignment),
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
            self._emit(RebalanceCompleted(group.group_id, generation_id, self.clock.wall_ms(),
                                          self.clock.monotonic_ms()))
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

    @_entry
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
            self._emit_fenced(group, request.member_id, instance_id, "Heartbeat")
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

    @_entry
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
                    self._emit_fenced(group, member_id, instance_id, "LeaveGroup")
                responses.append(_member_response(member_id, instance_id, error))

        left = [r["member_id"] for r in responses
                if r["error_code"] == ErrorCode.none and r["member_id"] not in joiners_left]
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
    # Offsets (OffsetCommit, OffsetFetch, OffsetDelete): see coordinator.offsets.manager
    # ========================================================================================================

    def offset_commit(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """OffsetCommit v2-v9."""
        result = self.offsets.commit_offsets(token, api_version, request)
        if self.listeners and result.records:
            self._emit(OffsetsWritten(request.group_id, committed=_count_offset_records(result.records)))
        return result

    def offset_fetch(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """OffsetFetch v1-v9 (one group before v8, a batch of groups from v8)."""
        return self.offsets.fetch_offsets(token, api_version, request)

    def offset_delete(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """OffsetDelete v0."""
        result = self.offsets.delete_offsets(token, api_version, request)
        if self.listeners and result.records:
            self._emit(OffsetsWritten(request.group_id, deleted=_count_offset_records(result.records)))
        return result

    # GroupView, for the offsets manager
    # ------------------------------------------------------------------------

    def validate_offset_commit(
        self,
        api_version: int,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # v9 answers GROUP_ID_NOT_FOUND for both protocols; older versions keep ILLEGAL_GENERATION.
                return ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
            # A commit from a consumer that does not use group management (or from an admin): a "simple" group
            # without a protocol type comes to exist for its offsets.
            log.info("creating simple group %s for a manual offset commit", group_id)
            group = self._create_group(group_id)
        error = group.validate_offset_commit(member_id, group_instance_id, generation_id)
        if error == ErrorCode.fenced_instance_id:
            self._emit_fenced(group, member_id, group_instance_id, "OffsetCommit")
        if error != ErrorCode.none:
            return error
        if group.state in (STABLE, PREPARING_REBALANCE):
            member = group.member(member_id)
            self._mark_online(group, member)
            self._reschedule_heartbeat(group, member)  # a commit keeps the session alive
        return ErrorCode.none

    def is_offset_fetch_allowed(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and not group.is_in_state(DEAD)

    def validate_offset_delete(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        return group.validate_offset_delete()

    def is_subscribed_to_topic(self, group_id: str, topic: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and group.is_subscribed_to_topic(topic)

    def offset_expiration_base(self, group_id: str) -> Callable[[int], int] | None:
        group = self.groups.get(group_id)
        if group is None:
            return lambda commit_timestamp_ms: commit_timestamp_ms
        return group.offset_expiration_base()

    def ensure_group(self, group_id: str) -> None:
        if group_id not in self.groups:
            self._create_group(group_id)

    # ========================================================================================================
    # DescribeGroups, ListGroups, DeleteGroups
    # ========================================================================================================

    def describe_groups(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """DescribeGroups v0-v6."""
        described = [self._describe_group(api_version, group_id) for group_id in request.groups]
        return CoordinatorResult(responses=[(token, build(DescribeGroupsResponse, {"groups": described}))])

    def _describe_group(self, api_version: int, group_id: str) -> dict[str, Any]:
        group = self.groups.get(group_id)
        if group is None or group.is_in_state(DEAD):
            if api_version >= 6:
                return {
                    "group_id": group_id,
                    "group_state": str(DEAD),
                    "error_code": ErrorCode.group_id_not_found,
                    "error_message": f"Group {group_id} not found.",
                    "protocol_type": "",
                    "protocol_data": "",
                    "authorized_operations": DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED,
                }
            return {
                "group_id": group_id,
                "group_state": str(DEAD),
                "error_code": ErrorCode.none,
                "protocol_type": "",
                "protocol_data": "",
                "authorized_operations": DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED,
            }
        stable = group.is_in_state(STABLE) and group.protocol_name is not None
        members = []
        for member in group.all_members():
            members.append(
                {
                    "member_id": member.member_id,
                    "group_instance_id": member.group_instance_id,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "member_metadata": member.metadata(group.protocol_name)
                    if stable and group.protocol_name
                    else b"",
                    "member_assignment": self._deliverable(group, member.assignment),
                }
            )
        return {
            "group_id": group_id,
            "error_code": ErrorCode.none,
            "group_state": str(group.state),
            "protocol_type": group.protocol_type or "",
            "protocol_data": group.protocol_name if stable and group.protocol_name else "",
            "members": members,
            "authorized_operations": DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED,
        }

    def list_groups(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """ListGroups v0-v5: states filter from v4, types filter from v5 (classic groups are "classic")."""
        states = {s.strip().lower() for s in getattr(request, "states_filter", ())}
        types = {t.strip().lower() for t in getattr(request, "types_filter", ())}
        listed = []
        if not types or CLASSIC_GROUP_TYPE in types:
            for group in self.groups.values():
                if states and str(group.state).lower() not in states:
                    continue
                listed.append(
                    {
                        "group_id": group.group_id,
                        "protocol_type": group.protocol_type or "",
                        "group_state": str(group.state),
                        "group_type": CLASSIC_GROUP_TYPE,
                    }
                )
        return CoordinatorResult(
            responses=[(token, build(ListGroupsResponse, {"error_code": ErrorCode.none, "groups": listed}))]
        )

    @_entry
    def delete_groups(self, token: object, api_version: int, request: Any) -> None:
        """DeleteGroups v0-v2: only Empty groups; their offsets and the group are tombstoned."""
        group_ids = list(request.groups_names)
        self._fx.own_token = token
        self._fx.own_error = lambda error: build(
            DeleteGroupsResponse,
            {"results": [{"group_id": group_id, "error_code": error} for group_id in group_ids]},
        )
        results = []
        deleted: list[ClassicGroup] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            error = ErrorCode.group_id_not_found if group is None else group.validate_delete_group()
            if group is not None and error == ErrorCode.none:
                self._fx.records.extend(self.offsets.delete_all_offsets(group_id))
                self._fx.records.append(new_group_metadata_tombstone(group_id))
                self._fx.records.extend(self._forget_own_state(group_id))
                self._remove_group(group)
                deleted.append(group)
            results.append({"group_id": group_id, "error_code": error})
        if deleted:
            log.info("deleted groups %s", [g.group_id for g in deleted])
            self._fx.failure_hooks.append(functools.partial(self._restore_groups, deleted))
        self._respond(token, build(DeleteGroupsResponse, {"results": results}))

    def _restore_groups(self, groups: Iterable[ClassicGroup], error: ErrorCode) -> dict[object, Any]:
        for group in groups:
            self.groups.setdefault(group.group_id, group)
        return {}

    # ========================================================================================================
    # Pause and resume; per-group settings (our own records, see coordinator.records)
    # ========================================================================================================
    #
    # A pause is operator intent about a group id, not state of the group: it lives on its own key, so a group
    # can be paused before it exists (a deployment pauses, then starts the new code) and the pause outlives the
    # group's expiry by offset retention (an Empty group whose offsets expire is forgotten, its pause is not:
    # the pause is what keeps a deployment's new code from consuming). DeleteGroups, an explicit removal of
    # everything the coordinator holds for the group, tombstones the pause and the per-group settings too.
    #
    # Only the "consumer" protocol's assignments can be read, so only such groups can be paused: a group that
    # exists with another protocol type is refused. A pause recorded before the group exists and a group that
    # then forms with another protocol type is not applied (logged at delivery).
    #
    # The leader's assignment is stored as the leader sent it; paused partitions are withheld when assignments
    # are delivered (SyncGroup answers, DescribeGroups), so resuming needs only a rebalance. Pause and resume
    # start one at once (Stable/CompletingRebalance -> PreparingRebalance): members see it at their next
    # heartbeat. Like a GroupMetadata record, the pause record is applied in memory by the handler and undone
    # if its append fails (then a rebalance hands out the old state again).

    def pause_state(self, group_id: str) -> PauseState:
        return self.pauses.get(group_id, NOT_PAUSED)

    def effective_settings(self, group_id: str) -> dict[str, int]:
        """The per-group settings in force for the group: its own values, else the server's."""
        return {name: self._group_setting(group_id, name) for name in PER_GROUP_SETTINGS}

    def _group_setting(self, group_id: str, name: str) -> int:
        own = self.group_settings.get(group_id)
        if own is not None and name in own:
            return own[name]
        return int(getattr(self.settings, PER_GROUP_SETTINGS[name]))

    def _set_pause(self, group_id: str, state: PauseState) -> None:
        if state.is_paused:
            self.pauses[group_id] = state
        else:
            self.pauses.pop(group_id, None)

    def _set_group_settings(self, group_id: str, settings: Mapping[str, int]) -> None:
        if settings:
            self.group_settings[group_id] = dict(settings)
        else:
            self.group_settings.pop(group_id, None)

    def _forget_own_state(self, group_id: str) -> list[CoordinatorRecord]:
        """Tombstones for the group's pause and settings, removed from memory now (DeleteGroups)."""
        records = []
        if group_id in self.pauses:
            records.append(new_group_pause_record(group_id, False, ()))
            del self.pauses[group_id]
        if group_id in self.group_settings:
            records.append(new_group_settings_record(group_id, {}))
            del self.group_settings[group_id]
        return records

    def _deliverable(self, group: ClassicGroup, assignment: bytes) -> bytes:
        """A member's assignment as handed out: without the partitions paused in its group."""
        state = self.pauses.get(group.group_id)
        if state is None or not assignment:
            return assignment
        if not group.uses_consumer_protocol():
            log.warning("group %s is paused but uses protocol type %r: its assignments cannot be filtered",
                        group.group_id, group.protocol_type)
            return assignment
        return filter_assignment(assignment, state.withholds)

    @_entry
    def pause_group(self, token: object, group_id: str, topics: Iterable[str] | None = None) -> None:
        """Pause the whole group (`topics` None or empty) or the partitions of `topics` (added to those already
        paused). Answers an AdminAnswer whose data is the resulting pause state."""
        old = self.pause_state(group_id)
        wanted = sorted(set(topics or ()))
        new = PauseState(True, old.topics) if not wanted else PauseState(old.group_paused,
                                                                        old.topics | frozenset(wanted))
        what = "the whole group" if not wanted else f"topics {wanted}"
        self._change_pause(token, group_id, old, new, f"pause of {what}")

    @_entry
    def resume_group(self, token: object, group_id: str, topics: Iterable[str] | None = None) -> None:
        """Resume the whole group (`topics` None or empty: everything paused is resumed) or the partitions of
        `topics`. Resuming topics of a group paused as a whole is refused: resume the group."""
        old = self.pause_state(group_id)
        wanted = sorted(set(topics or ()))
        if wanted and old.group_paused:
            self._respond(token, AdminAnswer(
                ErrorCode.invalid_request,
                f"group {group_id} is paused as a whole: resume the whole group (then pause topics if needed)",
                {"paused": old.to_json()}))
            return
        new = NOT_PAUSED if not wanted else PauseState(False, old.topics - frozenset(wanted))
        what = "the whole group" if not wanted else f"topics {wanted}"
        self._change_pause(token, group_id, old, new, f"resume of {what}")

    def _change_pause(self, token: object, group_id: str, old: PauseState, new: PauseState, what: str) -> None:
        if not group_id:
            self._respond(token, AdminAnswer(ErrorCode.invalid_group_id, "the group id is empty"))
            return
        group = self.groups.get(group_id)
        if group is not None and group.protocol_type is not None and not group.uses_consumer_protocol():
            self._respond(token, AdminAnswer(
                ErrorCode.inconsistent_group_protocol,
                f"group {group_id} uses protocol type {group.protocol_type!r}: only groups of protocol type "
                "'consumer' can be paused, because only their assignments can be read by the coordinator",
                {"paused": old.to_json()}))
            return
        answer = AdminAnswer(ErrorCode.none, f"{what} of group {group_id}: nothing changed"
                             if new == old else f"{what} of group {group_id} recorded", {"paused": new.to_json()})
        self._fx.own_token = token
        self._fx.own_error = lambda error: AdminAnswer(
            error, f"writing the {what} of group {group_id} failed ({error.name}); nothing changed",
            {"paused": old.to_json()})
        if new != old:
            self._fx.records.append(new_group_pause_record(group_id, new.group_paused, new.topics))
            self._set_pause(group_id, new)
            log.info("group %s: %s; paused now: %s", group_id, what, new.to_json())
            self._rebalance_for_admin(group, f"{what} by an administrator")

            def revert(error: ErrorCode) -> dict[object, Any]:
                if self.pause_state(group_id) == new:
                    self._set_pause(group_id, old)
                    self._rebalance_for_admin(self.groups.get(group_id),
                                              f"the {what} could not be written ({error.name})")
                return {}

            self._fx.failure_hooks.append(revert)
        self._respond(token, answer)

    def _rebalance_for_admin(self, group: ClassicGroup | None, reason: str) -> None:
        if group is not None and group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason, RebalanceTrigger(RebalanceReason.PAUSE))

    @_entry
    def set_group_settings(self, token: object, group_id: str, changes: Mapping[str, int | None]) -> None:
        """Set (an int >= 0) or unset (None: the server's value applies again) per-group settings, by their
        config names (PER_GROUP_SETTINGS). Answers an AdminAnswer with the group's own and effective values."""
        if not group_id:
            self._respond(token, AdminAnswer(ErrorCode.invalid_group_id, "the group id is empty"))
            return
        old = dict(self.group_settings.get(group_id, {}))
        new = dict(old)
        for name, value in changes.items():
            if name not in PER_GROUP_SETTINGS:
                self._respond(token, AdminAnswer(
                    ErrorCode.invalid_config,
                    f"{name!r} is not a per-group setting (known: {', '.join(sorted(PER_GROUP_SETTINGS))})"))
                return
            if value is None:
                new.pop(name, None)
            elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SETTING_VALUE:
                self._respond(token, AdminAnswer(
                    ErrorCode.invalid_config, f"{name} must be an integer from 0 to {MAX_SETTING_VALUE} or null"))
                return
            else:
                new[name] = value
        self._fx.own_token = token
        self._fx.own_error = lambda error: AdminAnswer(
            error, f"writing the settings of group {group_id} failed ({error.name}); nothing changed",
            self._settings_json(group_id))
        if new != old:
            self._fx.records.append(new_group_settings_record(group_id, new))
            self._set_group_settings(group_id, new)
            log.info("group %s: settings now %s", group_id, new)
            self._settings_changed(group_id)

            def revert(error: ErrorCode) -> dict[object, Any]:
                if self.group_settings.get(group_id, {}) == new:
                    self._set_group_settings(group_id, old)
                    self._settings_changed(group_id)
                return {}

            self._fx.failure_hooks.append(revert)
        self._respond(token, AdminAnswer(ErrorCode.none, f"settings of group {group_id} recorded",
                                         self._settings_json(group_id)))

    def _settings_json(self, group_id: str) -> dict[str, Any]:
        return {"settings": dict(sorted(self.group_settings.get(group_id, {}).items())),
                "effective_settings": self.effective_settings(group_id)}

    def _settings_changed(self, group_id: str) -> None:
        """Windows that run move to the new values (a window set to 0 ends now)."""
        group = self.groups.get(group_id)
        if group is None:
            return
        self._schedule_registration_end(group)
        self._schedule_expansion_end(group)

    # ========================================================================================================
    # Static membership windows (KIP-345's registration and expansion timeouts, which Kafka did not ship)
    # ========================================================================================================
    #
    # group.static.registration.timeout.ms (0 = off, Kafka's behaviour): when a static member's session
    # expires, it is marked offline instead of removed. It keeps its place, its instance id and its partitions;
    # it is not waited for by a join phase nor expected to SyncGroup. When it comes back (a JoinGroup with its
    # instance id and an unknown member id takes its place back as Kafka's static rejoin does, without a
    # rebalance in a Stable group; a Heartbeat, SyncGroup, JoinGroup or OffsetCommit under its member id), it is
    # online again. The window is the group's: it ends when the *earliest member still offline* has been offline
    # this long, and then one rebalance removes every member offline at that moment — members lost together cost
    # one rebalance. Offline marks are not durable: after a coordinator restart the sessions start again.
    #
    # group.expansion.timeout.ms (0 = off): a new member joining a Stable group is held back — its JoinGroup
    # parked, the member not yet in the group — and the window opens; further joiners are held back too. When
    # the window ends, one rebalance admits them all; any other rebalance meanwhile admits them at once. The
    # members already in the group keep heartbeating without REBALANCE_IN_PROGRESS until then. A held-back
    # JoinGroup waits the window plus the join phase; clients time JoinGroup out after their rebalance timeout
    # plus a margin (the Java client: rebalance timeout + 5 s), so the window closes no later than half the
    # rebalance timeout of any held-back joiner after it joined, leaving the other half for the join phase.

    def _mark_online(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        if member.offline_since_ms is not None:
            offline_ms = self.clock.monotonic_ms() - member.offline_since_ms
            group.mark_online(member)
            log.info("static member %s (%s) of group %s is back after %d ms offline", member.group_instance_id,
                     member.member_id, group.group_id, offline_ms)
            self._reschedule_heartbeat(group, member)  # its session timer fired and was not renewed
            self._schedule_registration_end(group)

    def _schedule_registration_end(self, group: ClassicGroup) -> None:
        offline = group.offline_members()
        key = registration_key(group.group_id)
        if not offline:
            self.timer.cancel(key)
            return
        timeout_ms = self._group_setting(group.group_id, REGISTRATION_TIMEOUT)
        earliest_ms = min(m.offline_since_ms for m in offline if m.offline_since_ms is not None)
        delay_ms = max(earliest_ms + timeout_ms - self.clock.monotonic_ms(), 0) if timeout_ms > 0 else 0
        self.timer.schedule(key, delay_ms, self._op(self._end_registration_window, group.group_id))

    def _end_registration_window(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in_state(DEAD):
            return
        offline = group.offline_members()
        if not offline:
            return
        timeout_ms = self._group_setting(group_id, REGISTRATION_TIMEOUT)
        earliest_ms = min(m.offline_since_ms for m in offline if m.offline_since_ms is not None)
        if timeout_ms > 0 and earliest_ms + timeout_ms > self.clock.monotonic_ms():
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
        log.info("group %s: registration window ended; removing offline static members %s", group_id, removed)
        reason = f"removing offline static members {removed} at the end of their registration window"
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(
                group, reason, RebalanceTrigger(RebalanceReason.SESSION_EXPIRY, first))
        elif group.is_in_state(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _hold_joiner(self, parked: Parked, join: _JoinRequest, group: ClassicGroup, member_id: str) -> None:
        if join.group_instance_id is not None:
            for other in list(group.expansion_joiners.values()):
                if other.group_instance_id == join.group_instance_id:
                    # The same static instance joined again (it restarted): the newer one takes the place.
                    self._emit_fenced(group, other.member_id, other.group_instance_id, "JoinGroup")
                    del group.expansion_joiners[other.member_id]
                    self.timer.cancel(session_timeout_key(group.group_id, other.member_id))
                    self._answer_parked_joiner(other, ErrorCode.fenced_instance_id)
        member = _new_member(member_id, join, awaiting_join=parked, joined_at_ms=self.clock.monotonic_ms())
        group.remove_pending_member(member_id)
        first = not group.expansion_joiners
        group.expansion_joiners[member_id] = member
        if first:
            group.expansion_opened_ms = self.clock.monotonic_ms()
        self._reschedule_heartbeat(group, member, self.settings.group_new_member_join_timeout_ms)
        log.info("group %s: new member %s (instance %s) held back by the expansion window (%d waiting)",
                 group.group_id, member_id, join.group_instance_id, len(group.expansion_joiners))
        self._schedule_expansion_end(group)

    def _schedule_expansion_end(self, group: ClassicGroup) -> None:
        key = expansion_key(group.group_id)
        if not group.expansion_joiners:
            self.timer.cancel(key)
            return
        timeout_ms = self._group_setting(group.group_id, EXPANSION_TIMEOUT)
        end_ms = group.expansion_opened_ms + timeout_ms
        for joiner in group.expansion_joiners.values():
            end_ms = min(end_ms, joiner.joined_at_ms + joiner.rebalance_timeout_ms // 2)
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
            if group.has_member(joiner.member_id) or (
                joiner.group_instance_id is not None and group.has_static_member(joiner.group_instance_id)
            ) or not group.supports_protocols(joiner.protocol_type, joiner.protocol_names()):
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

    # ========================================================================================================
    # Offset retention (KIP-211)
    # ========================================================================================================

    @_entry
    def expire_offsets(self) -> None:
        """Tombstone the offsets whose retention has passed, and delete Empty groups left without offsets.
        Kafka runs this every offsets.retention.check.interval.ms."""
        now_ms = self._now_ms()
        for group_id, group in list(self.groups.items()):
            records, all_expired = self.offsets.cleanup_expired_offsets(group_id, now_ms)
            self._fx.records.extend(records)
            if self.listeners and records:
                self._emit(OffsetsWritten(group_id, expired=_count_offset_records(records)))
            if all_expired and group.is_empty():
                self._fx.records.append(new_group_metadata_tombstone(group_id))
                self._remove_group(group)
        if self._fx.records:
            log.info("offset retention wrote %d tombstones", len(self._fx.records))

    # ========================================================================================================
    # Loading: replay, on_loaded, on_unloaded
    # ========================================================================================================

    def replay_entry(self, key: bytes, value: bytes | None) -> None:
        """`replay(CoordinatorRecord(key, value))`, with a shortcut for the record a big log is made of: an
        offset commit without metadata is stored from its fields, without building key and value objects
        (loading a log of 1,000,000 offsets calls this once per entry)."""
        if value is not None:
            fields = simple_offset_commit(key, value)
            if fields is not None:
                if fields[0] not in self.groups:
                    self._create_group(fields[0])
                self.offsets.store.replay_simple(*fields)
                return
        self.replay(CoordinatorRecord(key, value))

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply a durable record (see the module doc): offsets always; a GroupMetadata record only if this
        coordinator did not write it itself — that is, while loading the log. Records of types this
        coordinator does not know (Kafka's KIP-848 records) are skipped."""
        try:
            key, value = decode_record(record)
        except UnknownRecordType as exc:
            log.warning("skipping record: %s", exc)
            return
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self.offsets.replay(key, value)
        elif self._unreplayed[record] > 0:
            self._unreplayed[record] -= 1
            if not self._unreplayed[record]:
                del self._unreplayed[record]
        elif isinstance(key, GroupPauseKey):
            assert value is None or isinstance(value, GroupPauseValue)
            self._set_pause(key.group, NOT_PAUSED if value is None
                            else PauseState(value.group_paused, frozenset(value.topics)))
        elif isinstance(key, GroupSettingsKey):
            assert value is None or isinstance(value, GroupSettingsValue)
            self._set_group_settings(key.group, {} if value is None else dict(value.settings))
        else:
            assert value is None or isinstance(value, GroupMetadataValue)
            self._replay_group_metadata(key, value)

    def _replay_group_metadata(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
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
                )
            )
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[key.group] = group

    @_entry
    def on_loaded(self) -> None:
        """The log is loaded: session timers start for every loaded member, and groups over group.max.size
        (the setting may have shrunk) rebalance."""
        for group in list(self.groups.values()):
            for member in group.all_members():
                self._reschedule_heartbeat(group, member)
            if self.listeners:
                self._emit(GroupLoaded(group.group_id, group.generation_id, str(group.state),
                                       self._members_info(group), self.clock.wall_ms(),
                                       self.clock.monotonic_ms()))
            if group.num_members() > self.settings.group_max_size:
                self._prepare_rebalance(
                    group,
                    f"freshly loaded group {group.group_id} (size "
                    f"{group.num_members()}) is over capacity "
                    f"{self.settings.group_max_size}",
                )
        offsets = self.offsets.store.num_offsets()
        # One line per shard: only the shards that hold something are worth an info line.
        log.log(logging.INFO if self.groups or offsets else logging.DEBUG, "loaded %d groups and %d offsets",
                len(self.groups), offsets)

    @_entry
    def on_unloaded(self) -> None:
        """The shard is going away: parked requests are answered NOT_COORDINATOR, timers are cancelled."""
        for group in list(self.groups.values()):
            for member in group.all_members():
                self._answer_join(group, member, error=ErrorCode.not_coordinator, member_id=member.member_id)
                self._answer_sync(group, member, error=ErrorCode.not_coordinator)
            for joiner in group.expansion_joiners.values():
                self._answer_parked_joiner(joiner, ErrorCode.not_coordinator)
            group.expansion_joiners.clear()
            self._remove_group(group)
        self.groups.clear()


def _is_group_metadata(record: CoordinatorRecord) -> bool:
    return record.key[:2] == GROUP_METADATA_KEY_PREFIX


def _is_applied_in_memory(record: CoordinatorRecord) -> bool:
    """Records whose handler already applied them to memory: their replay while serving is skipped."""
    return record.key[:2] in _APPLIED_IN_MEMORY_PREFIXES


def _count_offset_records(records: Iterable[CoordinatorRecord]) -> int:
    return sum(1 for r in records if r.key[:2] == OFFSET_COMMIT_KEY_PREFIX)


def _inconsistent(request_value: str | None, group_value: str | None) -> bool:
    return request_value is not None and group_value is not None and request_value != group_value


def _member_response(member_id: str, group_instance_id: str | None, error: ErrorCode) -> dict[str, Any]:
    return {"member_id": member_id, "group_instance_id": group_instance_id, "error_code": error}
