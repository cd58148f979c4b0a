"""One shard of the group coordinator (Kafka's GroupCoordinatorShard): the face of the pure state machine.

A shard owns the groups whose ids hash to it (coordinator.sharding) and everything durable about them, in the
records of its own log. It routes each group and offset API and each admin operation to the part that owns it,
and composes those parts:

* `GroupMetadataManager` (coordinator.group.manager): classic groups, JoinGroup/SyncGroup/Heartbeat/LeaveGroup;
* `ConsumerGroupManager` (coordinator.consumer.manager): consumer groups (KIP-848), ConsumerGroupHeartbeat and
  ConsumerGroupDescribe; group ids are one namespace shared with the classic groups;
* `OffsetMetadataManager` (coordinator.offsets.manager): OffsetCommit/OffsetFetch/OffsetDelete and retention,
  validated against the groups (it asks the group manager, never the other way round);
* `PauseRegistry` and `GroupSettingsRegistry` (coordinator.group.pause, .settings): operator intent about group
  ids, durable as records of our own types;
* DescribeGroups/ListGroups (coordinator.group.describe) are reads over the groups.

Like its parts it is pure: time comes from the injected Clock and Timer, and each handler returns a
`CoordinatorResult` whose answers the runtime releases once the result's records are durable. The parts share
one `Calls` (coordinator.group.effects): an entry point here or in a manager is one call into the state machine.

Replay. `replay(record)` is the only code that changes committed offsets, and it dispatches every record by
type: offset commits go to the offsets manager whenever the runtime replays them (while serving, after they are
durable, and while loading); GroupMetadata, GroupPause and GroupSettings records are applied in memory by the
handler that writes them, so their replay while serving is skipped (counted in `Calls.unreplayed`) and only the
log being loaded applies them. Records of types this coordinator does not know are skipped with a warning.

Admin operations (pause, resume, per-group settings, DeleteGroups) follow the GroupMetadata rule: applied at
once, undone if the append fails, answered (an `AdminAnswer` for ours) once durable.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
from kio.schema.describe_groups.v6.response import DescribeGroupsResponse
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.schema.list_config_resources.v0.response import (
    ListConfigResourcesResponse as ListConfigResourcesResponseV0,
)
from kio.schema.list_config_resources.v1.response import ListConfigResourcesResponse
from kio.schema.list_groups.v5.response import ListGroupsResponse

from coordinator.clock import Clock, Timer
from coordinator.consumer import records as consumer_records
from coordinator.consumer.group import ConsumerGroup
from coordinator.consumer.manager import ConsumerGroupManager, ConsumerGroupSettings, TopicImage
from coordinator.group import configs as group_configs
from coordinator.group.describe import describe_group, list_group_entries
from coordinator.group.effects import Calls, state_machine_call
from coordinator.group.events import GroupEventListener, OffsetsWritten
from coordinator.group.group import ClassicGroup
from coordinator.group.manager import GroupMetadataManager
from coordinator.group.pause import NOT_PAUSED, PauseRegistry, PauseState
from coordinator.group.rebalance import join_timeouts
from coordinator.group.responses import join_response
from coordinator.group.settings import (
    GroupCoordinatorSettings,
    GroupSettingsRegistry,
    validate_setting_changes,
)
from coordinator.offsets.manager import OffsetMetadataManager
from coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupOfflineKey,
    GroupOfflineValue,
    GroupPauseKey,
    GroupPauseValue,
    GroupSettingsKey,
    GroupSettingsValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordType,
    count_offset_records,
    decode_record,
    new_group_metadata_tombstone,
    new_group_pause_record,
    new_group_settings_record,
    simple_offset_commit,
)
from coordinator.result import CoordinatorResult
from protocol.build import build
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class _ClassicGroupsOfShard:
    """The shard's classic groups as its consumer groups see them (coordinator.consumer.manager.ClassicGroups):
    for the migrations between the two types."""

    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self._shard = shard

    @property
    def max_size(self) -> int:
        return self._shard.settings.group_max_size

    def get(self, group_id: str) -> ClassicGroup | None:
        return self._shard.groups.get(group_id)

    def remove_empty(self, group_id: str) -> list[CoordinatorRecord]:
        group = self._shard.groups[group_id]
        self._shard.classic.remove_group(group)
        self._shard.calls.fx.failure_hooks.append(lambda error: self._shard._restore_groups([group]))
        return [new_group_metadata_tombstone(group_id)]

    def take(self, group_id: str) -> list[CoordinatorRecord]:
        shard = self._shard
        group = shard.groups[group_id]
        shard.classic.detach_for_upgrade(group)

        def restore(error: ErrorCode) -> dict[object, Any]:
            if group_id not in shard.groups:
                shard.consumer.drop_group(group_id)  # (the consumer group this write made)
                shard.groups[group_id] = group
                shard.classic.restart_sessions(group)
            return {}

        shard.calls.fx.failure_hooks.append(restore)
        return [new_group_metadata_tombstone(group_id)]

    def install(self, group: ClassicGroup, reason: str, *, rebalance: bool = True) -> None:
        shard = self._shard
        shard.classic.adopt_downgraded(group, reason, rebalance=rebalance)

        def remove(error: ErrorCode) -> dict[object, Any]:
            if shard.groups.get(group.group_id) is group:
                shard.classic.remove_group(group)
            return {}

        shard.calls.fx.failure_hooks.append(remove)


@dataclasses.dataclass(frozen=True, slots=True)
class AdminAnswer:
    """The answer of an admin operation on a group (pause, resume, settings): NONE or an error, a message for
    people, and the resulting state."""

    error: ErrorCode = ErrorCode.none
    message: str = ""
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class GroupCoordinatorShard:
    def __init__(
        self,
        clock: Clock,
        timer: Timer,
        settings: GroupCoordinatorSettings | Mapping[str, Any] | Any = None,
        *,
        new_uuid: Callable[[], str] | None = None,
        topics: TopicImage | None = None,
        consumer_settings: ConsumerGroupSettings | None = None,
        **overrides: int,
    ) -> None:
        """`settings` is a GroupCoordinatorSettings, or anything indexed by Kafka's names
        (coordinator.config.Config); keyword overrides use the Python names
        (`group_initial_rebalance_delay_ms=0`). `new_uuid` makes member ids predictable in tests. `topics`: the
        topics consumer groups are assigned from (without them ConsumerGroupHeartbeat answers
        UNSUPPORTED_VERSION); `consumer_settings` default to `settings`' group.consumer.* values."""
        if consumer_settings is None:
            consumer_settings = (
                ConsumerGroupSettings()
                if settings is None or isinstance(settings, GroupCoordinatorSettings)
                else ConsumerGroupSettings.from_config(settings)
            )
        if settings is None:
            settings = GroupCoordinatorSettings()
        elif not isinstance(settings, GroupCoordinatorSettings):
            settings = GroupCoordinatorSettings.from_config(settings)
        self.settings: GroupCoordinatorSettings = dataclasses.replace(settings, **overrides)
        self.clock = clock
        self.calls = Calls()
        self.pauses = PauseRegistry()
        self.group_settings = GroupSettingsRegistry(self.settings)
        self.classic = GroupMetadataManager(
            self.calls, clock, timer, self.settings, self.pauses, self.group_settings, new_uuid=new_uuid
        )
        self.consumer = ConsumerGroupManager(
            self.calls,
            clock,
            timer,
            consumer_settings,
            topics,
            classic=_ClassicGroupsOfShard(self),
            withholds=lambda group_id, topic: self.pauses.state(group_id).withholds(topic),
            group_setting=lambda group_id, name: self.group_settings.by_group.get(group_id, {}).get(name),
            new_uuid=new_uuid,
        )
        self.offsets = OffsetMetadataManager(
            self.classic,
            clock,
            consumer=self.consumer,
            offset_metadata_max_bytes=self.settings.offset_metadata_max_bytes,
            offsets_retention_ms=self.settings.offsets_retention_ms,
        )

    # -- for observers ---------------------------------------------------------------------------------------

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.classic.groups

    @property
    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        return self.consumer.groups

    def consumer_topic_name(self, topic_id: uuid.UUID) -> str | None:
        topics = self.consumer.topics
        return None if topics is None else topics.topic_name(topic_id)

    @property
    def consumer_settings(self) -> ConsumerGroupSettings:
        return self.consumer.settings

    def add_listener(self, listener: GroupEventListener) -> None:
        """`listener.on_group_event(event)` is called synchronously for every event, with this shard's clock
        in the timestamps; what it raises is logged and ignored."""
        self.calls.listeners.append(listener)

    def pause_state(self, group_id: str) -> PauseState:
        return self.pauses.state(group_id)

    def pause_progress(self, group_id: str) -> dict[str, Any]:
        """Whether the group's pause state is in effect: every member has synced an assignment filtered by it
        (or the group has no members). Otherwise the group's state and the members still to sync it."""
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            pending = self.consumer.pause_pending(consumer_group)
            return {
                "in_effect": not pending,
                "state": str(consumer_group.state),
                "generation": consumer_group.group_epoch,
                "members_synced": len(consumer_group.members) - len(pending),
                "pending_members": pending,
            }
        group = self.groups.get(group_id)
        if group is None:
            return {
                "in_effect": True,
                "state": "Dead",
                "generation": -1,
                "members_synced": 0,
                "pending_members": [],
            }
        unsynced = self.pauses.unsynced(group)
        pending = sorted(m.member_id for m in unsynced)
        return {
            "in_effect": self.pauses.in_effect(group, unsynced),
            "state": str(group.state),
            "generation": group.generation_id,
            "members_synced": group.num_members() - len(pending),
            "pending_members": pending,
        }

    def effective_settings(self, group_id: str) -> dict[str, int]:
        """The per-group settings in force for the group: its own values, else the server's."""
        return self.group_settings.effective(group_id)

    # -- group APIs ------------------------------------------------------------------------------------------

    def join_group(
        self, token: object, api_version: int, request: Any, *, client_id: str = "", client_host: str = ""
    ) -> CoordinatorResult:
        """JoinGroup v0-v9. `client_id` and `client_host` come from the request header and the connection."""
        if request.group_id in self.consumer.groups:
            return self._join_consumer_group(
                token, api_version, request, client_id=client_id, client_host=client_host
            )
        return self.classic.join_group(
            token, api_version, request, client_id=client_id, client_host=client_host
        )

    def _join_consumer_group(
        self, token: object, api_version: int, request: Any, *, client_id: str, client_host: str
    ) -> CoordinatorResult:
        """A JoinGroup to the id of a consumer group: an empty one is replaced by a classic group (Kafka's
        offline downgrade); one with members takes the joiner as a member of the classic protocol
        (coordinator.consumer.migration)."""
        group = self.consumer.groups[request.group_id]
        if group.is_empty():
            return self._replace_empty_consumer_group(
                token, api_version, request, client_id=client_id, client_host=client_host
            )
        session_timeout_ms, rebalance_timeout_ms = join_timeouts(api_version, request)
        if not self.classic.session_timeout_allowed(session_timeout_ms):
            return CoordinatorResult(
                responses=[
                    (
                        token,
                        join_response(
                            api_version, error=ErrorCode.invalid_session_timeout, member_id=request.member_id
                        ),
                    )
                ]
            )
        return self.consumer.classic_join(
            token,
            api_version,
            request,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id,
            client_host=client_host,
        )

    @state_machine_call
    def _replace_empty_consumer_group(
        self, token: object, api_version: int, request: Any, *, client_id: str, client_host: str
    ) -> None:
        group_id = request.group_id
        group = self.consumer.groups[group_id]
        self.calls.fx.records.extend(self.consumer.remove_group(group_id))
        self.calls.fx.failure_hooks.append(lambda error: self._restore_consumer_groups([group]))
        log.info("group %s: the empty consumer group is replaced by a classic group", group_id)
        classic_join = GroupMetadataManager.join_group.__wrapped__  # type: ignore[attr-defined]
        classic_join(self.classic, token, api_version, request, client_id=client_id, client_host=client_host)

    def sync_group(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        if request.group_id in self.consumer.groups:
            return self.consumer.classic_sync(token, api_version, request)
        return self.classic.sync_group(token, api_version, request)

    def heartbeat(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        if request.group_id in self.consumer.groups:
            return self.consumer.classic_heartbeat(token, api_version, request)
        return self.classic.heartbeat(token, api_version, request)

    def leave_group(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        if request.group_id in self.consumer.groups:
            return self.consumer.classic_leave(token, api_version, request)
        return self.classic.leave_group(token, api_version, request)

    def consumer_group_heartbeat(
        self, token: object, api_version: int, request: Any, *, client_id: str = "", client_host: str = ""
    ) -> CoordinatorResult:
        """ConsumerGroupHeartbeat v0-v1 (KIP-848)."""
        return self.consumer.heartbeat(
            token, api_version, request, client_id=client_id, client_host=client_host
        )

    def consumer_group_describe(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """ConsumerGroupDescribe v0-v1."""
        from kio.schema.consumer_group_describe.v1.response import ConsumerGroupDescribeResponse

        described = self.consumer.describe(request.group_ids)
        return CoordinatorResult(
            responses=[
                (token, build(ConsumerGroupDescribeResponse, {"throttle_time": 0, "groups": described}))
            ]
        )

    def describe_groups(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """DescribeGroups v0-v6. A consumer group is not described here (Kafka: GROUP_ID_NOT_FOUND from v6,
        Dead before): ConsumerGroupDescribe describes it."""
        described = [
            describe_group(group_id, self.groups.get(group_id), api_version, self.pauses.deliverable)
            if group_id not in self.consumer.groups
            else {
                "error_code": ErrorCode.group_id_not_found if api_version >= 6 else ErrorCode.none,
                "error_message": f"Group {group_id} is not a classic group." if api_version >= 6 else None,
                "group_id": group_id,
                "group_state": "Dead",
                "protocol_type": "",
                "protocol_data": "",
                "members": (),
                "authorized_operations": -2147483648,
            }
            for group_id in request.groups
        ]
        return CoordinatorResult(responses=[(token, build(DescribeGroupsResponse, {"groups": described}))])

    def list_groups(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """ListGroups v0-v5."""
        listed = list_group_entries(self.groups.values(), request)
        listed += self.consumer.list_entries(
            (s.strip() for s in getattr(request, "states_filter", ())),
            (t.strip() for t in getattr(request, "types_filter", ())),
        )
        return CoordinatorResult(
            responses=[(token, build(ListGroupsResponse, {"error_code": ErrorCode.none, "groups": listed}))]
        )

    @state_machine_call
    def delete_groups(self, token: object, api_version: int, request: Any) -> None:
        """DeleteGroups v0-v2: only Empty groups; their offsets, the group, its pause and its settings are
        tombstoned."""
        group_ids = list(request.groups_names)
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = lambda error: build(
            DeleteGroupsResponse,
            {"results": [{"group_id": group_id, "error_code": error} for group_id in group_ids]},
        )
        results = []
        deleted: list[ClassicGroup] = []
        deleted_consumer: list[ConsumerGroup] = []
        for group_id in group_ids:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:
                error = ErrorCode.none if consumer_group.is_empty() else ErrorCode.non_empty_group
                if error == ErrorCode.none:
                    fx.records.extend(self.offsets.delete_all_offsets(group_id))
                    fx.records.extend(self.consumer.remove_group(group_id))
                    fx.records.extend(self.pauses.forget(group_id))
                    fx.records.extend(self.group_settings.forget(group_id))
                    deleted_consumer.append(consumer_group)
                results.append({"group_id": group_id, "error_code": error})
                continue
            group = self.groups.get(group_id)
            error = ErrorCode.group_id_not_found if group is None else group.validate_delete_group()
            if group is not None and error == ErrorCode.none:
                fx.records.extend(self.offsets.delete_all_offsets(group_id))
                fx.records.append(new_group_metadata_tombstone(group_id))
                fx.records.extend(self.pauses.forget(group_id))
                fx.records.extend(self.group_settings.forget(group_id))
                self.classic.remove_group(group)
                deleted.append(group)
            results.append({"group_id": group_id, "error_code": error})
        if deleted:
            log.info("deleted groups %s", [g.group_id for g in deleted])
            fx.failure_hooks.append(lambda error: self._restore_groups(deleted))
        if deleted_consumer:
            log.info("deleted consumer groups %s", [g.group_id for g in deleted_consumer])
            fx.failure_hooks.append(lambda error: self._restore_consumer_groups(deleted_consumer))
        self.calls.respond(token, build(DeleteGroupsResponse, {"results": results}))

    def _restore_groups(self, groups: Iterable[ClassicGroup]) -> dict[object, Any]:
        for group in groups:
            self.groups.setdefault(group.group_id, group)
        return {}

    def _restore_consumer_groups(self, groups: Iterable[ConsumerGroup]) -> dict[object, Any]:
        for group in groups:
            self.consumer.restore_group(group)
        return {}

    # -- offset APIs -----------------------------------------------------------------------------------------

    def offset_commit(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """OffsetCommit v2-v9."""
        result = self.offsets.commit_offsets(token, api_version, request)
        if self.calls.listeners and result.records:  # (every record of a commit is an offset commit)
            self.calls.emit(OffsetsWritten(request.group_id, committed=len(result.records)))
        return result

    def offset_fetch(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """OffsetFetch v1-v9 (one group before v8, a batch of groups from v8)."""
        return self.offsets.fetch_offsets(token, api_version, request)

    def offset_delete(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """OffsetDelete v0."""
        result = self.offsets.delete_offsets(token, api_version, request)
        if self.calls.listeners and result.records:
            self.calls.emit(OffsetsWritten(request.group_id, deleted=count_offset_records(result.records)))
        return result

    @state_machine_call
    def expire_offsets(self) -> None:
        """Tombstone the offsets whose retention has passed, and delete Empty groups left without offsets.
        Kafka runs this every offsets.retention.check.interval.ms."""
        fx = self.calls.fx
        now_ms = self.clock.wall_ms()
        for group_id, group in list(self.groups.items()):
            records, all_expired = self.offsets.cleanup_expired_offsets(group_id, now_ms)
            fx.records.extend(records)
            if self.calls.listeners and records:
                self.calls.emit(OffsetsWritten(group_id, expired=count_offset_records(records)))
            if all_expired and group.is_empty():
                fx.records.append(new_group_metadata_tombstone(group_id))
                self.classic.remove_group(group)
        for group_id, consumer_group in list(self.consumer.groups.items()):
            records, all_expired = self.offsets.cleanup_expired_offsets(group_id, now_ms)
            fx.records.extend(records)
            if self.calls.listeners and records:
                self.calls.emit(OffsetsWritten(group_id, expired=count_offset_records(records)))
            if all_expired and consumer_group.is_empty():
                fx.records.extend(self.consumer.remove_group(group_id))
        if fx.records:
            log.info("offset retention wrote %d tombstones", len(fx.records))

    # -- admin: pause and resume, per-group settings ---------------------------------------------------------

    @state_machine_call
    def pause_group(self, token: object, group_id: str, topics: Iterable[str] | None = None) -> None:
        """Pause the whole group (`topics` None or empty) or the partitions of `topics` (added to those already
        paused). Answers an AdminAnswer whose data is the resulting pause state."""
        old = self.pauses.state(group_id)
        wanted = sorted(set(topics or ()))
        new = (
            PauseState(True, old.topics)  # the whole group again: nothing is exempt any more
            if not wanted
            else PauseState(old.group_paused, old.topics | frozenset(wanted), old.resumed - frozenset(wanted))
        )
        what = "the whole group" if not wanted else f"topics {wanted}"
        self._change_pause(token, group_id, old, new, f"pause of {what}")

    @state_machine_call
    def resume_group(self, token: object, group_id: str, topics: Iterable[str] | None = None) -> None:
        """Resume the whole group (`topics` None or empty: everything paused is resumed) or the partitions of
        `topics`; in a group paused as a whole, those topics are exempt from the pause and the rest stays
        paused."""
        old = self.pauses.state(group_id)
        wanted = frozenset(topics or ())
        new = (
            NOT_PAUSED
            if not wanted
            else PauseState(
                old.group_paused,
                old.topics - wanted,
                old.resumed | wanted if old.group_paused else frozenset(),
            )
        )
        what = "the whole group" if not wanted else f"topics {sorted(wanted)}"
        self._change_pause(token, group_id, old, new, f"resume of {what}")

    def _change_pause(
        self, token: object, group_id: str, old: PauseState, new: PauseState, what: str
    ) -> None:
        """Pause and resume start a rebalance at once (Stable/CompletingRebalance -> PreparingRebalance): members
        see it at their next heartbeat. Applied in memory now, undone if the append fails (then a rebalance hands
        out the old state again)."""
        if not group_id:
            self.calls.respond(token, AdminAnswer(ErrorCode.invalid_group_id, "the group id is empty"))
            return
        group = self.groups.get(group_id)
        if group is not None and group.protocol_type is not None and not group.uses_consumer_protocol():
            self.calls.respond(
                token,
                AdminAnswer(
                    ErrorCode.inconsistent_group_protocol,
                    f"group {group_id} uses protocol type {group.protocol_type!r}: only groups of protocol type "
                    "'consumer' can be paused, because only their assignments can be read by the coordinator",
                    {"paused": old.to_json()},
                ),
            )
            return
        answer = AdminAnswer(
            ErrorCode.none,
            f"{what} of group {group_id}: nothing changed"
            if new == old
            else f"{what} of group {group_id} recorded",
            {"paused": new.to_json()},
        )
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = lambda error: AdminAnswer(
            error,
            f"writing the {what} of group {group_id} failed ({error.name}); nothing changed",
            {"paused": old.to_json()},
        )
        if new != old:
            fx.records.append(new_group_pause_record(group_id, new.group_paused, new.topics, new.resumed))
            self.pauses.set(group_id, new)
            log.info("group %s: %s; paused now: %s", group_id, what, new.to_json())
            self.classic.rebalance_for_admin(group_id, f"{what} by an administrator")
            self.consumer.pause_changed(group_id, f"{what} by an administrator")

            def revert(error: ErrorCode) -> dict[object, Any]:
                if self.pauses.state(group_id) == new:
                    self.pauses.set(group_id, old)
                    self.classic.rebalance_for_admin(
                        group_id, f"the {what} could not be written ({error.name})"
                    )
                    self.consumer.pause_changed(group_id, f"the {what} could not be written ({error.name})")
                return {}

            fx.failure_hooks.append(revert)
        self.calls.respond(token, answer)

    @state_machine_call
    def set_group_settings(self, token: object, group_id: str, changes: Mapping[str, int | None]) -> None:
        """Set (an int >= 0) or unset (None: the server's value applies again) per-group settings, by their
        config names (PER_GROUP_SETTINGS). Answers an AdminAnswer with the group's own and effective values."""
        if not group_id:
            self.calls.respond(token, AdminAnswer(ErrorCode.invalid_group_id, "the group id is empty"))
            return
        refused = self._settings_refused(group_id, changes)
        if refused is not None:
            self.calls.respond(token, AdminAnswer(ErrorCode.invalid_config, refused))
            return
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = lambda error: AdminAnswer(
            error,
            f"writing the settings of group {group_id} failed ({error.name}); nothing changed",
            self.group_settings.to_json(group_id),
        )
        self._change_settings(group_id, changes)
        self.calls.respond(
            token,
            AdminAnswer(
                ErrorCode.none,
                f"settings of group {group_id} recorded",
                self.group_settings.to_json(group_id),
            ),
        )

    def _settings_refused(self, group_id: str, changes: Mapping[str, int | None]) -> str | None:
        """Why a change of the group's own settings is refused, or None."""
        refused = validate_setting_changes(changes)
        if refused is not None:
            return refused
        return self.consumer.validate_group_settings(
            group_configs.applied(self.group_settings.own(group_id), changes)
        )

    def _change_settings(self, group_id: str, changes: Mapping[str, int | None]) -> None:
        """(In a state machine call, `changes` validated.) Applied now, their record written, undone if the append
        fails."""
        old = self.group_settings.own(group_id)
        new = group_configs.applied(old, changes)
        if new == old:
            return
        self.calls.fx.records.append(new_group_settings_record(group_id, new))
        self.group_settings.set(group_id, new)
        log.info("group %s: settings now %s", group_id, new)
        self.classic.settings_changed(group_id)

        def revert(error: ErrorCode) -> dict[object, Any]:
            if self.group_settings.own(group_id) == new:
                self.group_settings.set(group_id, old)
                self.classic.settings_changed(group_id)
            return {}

        self.calls.fx.failure_hooks.append(revert)

    # -- Kafka's group configs (kafka-configs --entity-type groups) ------------------------------------------

    def describe_configs(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """DescribeConfigs v1-v4 of GROUP resources (coordinator.group.configs); other resource types are not
        served here."""
        results = [
            group_configs.describe_result(
                self.group_settings,
                resource.resource_name,
                resource.configuration_keys,
                bool(getattr(request, "include_synonyms", False)),
                bool(getattr(request, "include_documentation", False)),
            )
            if resource.resource_type == group_configs.GROUP_RESOURCE
            else group_configs.not_served(resource.resource_type, resource.resource_name)
            for resource in request.resources
        ]
        return CoordinatorResult(
            responses=[(token, build(DescribeConfigsResponse, {"throttle_time": 0, "results": results}))]
        )

    def list_config_resources(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        """ListConfigResources v0-v1 (Kafka 4.1's, KIP-1142), this shard's part: with GROUP among the types asked
        for (or none named), every group it knows and every group id with configs of its own. v0 lists client
        metrics resources, which are not served: none."""
        types = set(getattr(request, "resource_types", ()) or ())
        names: set[str] = set()
        if api_version >= 1 and (not types or group_configs.GROUP_RESOURCE in types):
            names = set(self.groups) | set(self.consumer.groups) | set(self.group_settings.by_group)
        resources = [
            {"resource_name": n, "resource_type": group_configs.GROUP_RESOURCE}
            if api_version >= 1
            else {"resource_name": n}
            for n in sorted(names)
        ]
        answer = {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": resources}
        response_type = ListConfigResourcesResponse if api_version >= 1 else ListConfigResourcesResponseV0
        return CoordinatorResult(responses=[(token, build(response_type, answer))])

    @state_machine_call
    def incremental_alter_configs(self, token: object, api_version: int, request: Any) -> None:
        """IncrementalAlterConfigs v0-v1 of GROUP resources: each resource's changes are validated, then (unless
        `validate_only`) applied and written as the group's settings record; a failed append undoes all of them
        and answers COORDINATOR_NOT_AVAILABLE for each."""
        validate_only = bool(request.validate_only)
        answers: list[dict[str, Any]] = []
        changed: list[str] = []
        for resource in request.resources:
            rtype, name = resource.resource_type, resource.resource_name
            code, message = ErrorCode.none, None
            if rtype != group_configs.GROUP_RESOURCE:
                code, message = ErrorCode.invalid_request, group_configs.not_served_message(rtype)
            elif not name:
                code, message = ErrorCode.invalid_request, "Group name must not be empty"
            else:
                changes, why = group_configs.alterations(resource.configs)
                why = why or self._settings_refused(name, changes)
                if why is not None:
                    code, message = ErrorCode.invalid_config, why
                elif not validate_only:
                    self._change_settings(name, changes)
                    changed.append(name)
            answers.append(group_configs.alter_result(rtype, name, code, message))
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = lambda error: build(
            IncrementalAlterConfigsResponse,
            {
                "throttle_time": 0,
                "responses": [
                    {
                        **a,
                        "error_code": error,
                        "error_message": f"the configs could not be written ({error.name})",
                    }
                    if a["error_code"] == ErrorCode.none
                    else a
                    for a in answers
                ],
            },
        )
        if changed:
            log.info("group configs altered (kafka-configs): %s", changed)
        self.calls.respond(
            token, build(IncrementalAlterConfigsResponse, {"throttle_time": 0, "responses": answers})
        )

    # -- loading: replay, on_loaded, on_unloaded -------------------------------------------------------------

    def replay_entries(self, entries: Iterable[tuple[int, bytes, bytes | None, int]]) -> int:
        """`replay(CoordinatorRecord(key, value))` of each (seq, key, value, timestamp) of a log, in order (the seq
        and timestamp are not used); returns how many. The record a big log is made of, an offset commit without
        metadata, is stored from its fields, without building key and value objects (loading a log of 1,000,000
        offsets goes through here once per entry, so the lookups are made once per call)."""
        groups = self.classic.groups
        consumer_groups = self.consumer.groups
        create_group = self.classic.create_group
        replay_simple = self.offsets.store.replay_simple
        count = 0
        for _seq, key, value, _timestamp_ms in entries:
            count += 1
            if value is not None:
                fields = simple_offset_commit(key, value)
                if fields is not None:
                    if fields[0] not in groups and fields[0] not in consumer_groups:
                        create_group(fields[0])
                    replay_simple(*fields)
                    continue
            self.replay(CoordinatorRecord(key, value))
        return count

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply a durable record (see the module doc)."""
        if consumer_records.is_consumer_record(record.key):
            self._replay_consumer(record)
            return
        try:
            key, value = decode_record(record)
        except UnknownRecordType as exc:
            log.warning("skipping record: %s", exc)
            return
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self.offsets.replay(key, value)
        elif self.calls.replayed(record):
            pass  # its handler applied it in memory when it wrote it
        elif isinstance(key, GroupPauseKey):
            assert value is None or isinstance(value, GroupPauseValue)
            self.pauses.replay(key.group, value)
        elif isinstance(key, GroupSettingsKey):
            assert value is None or isinstance(value, GroupSettingsValue)
            self.group_settings.replay(key.group, value)
        elif isinstance(key, GroupOfflineKey):
            assert value is None or isinstance(value, GroupOfflineValue)
            # (a group id is a classic or a consumer group when loading ends: each applies the marks to its own)
            self.classic.replay_group_offline(key.group, value)
            self.consumer.replay_group_offline(key.group, value)
        else:
            assert isinstance(key, GroupMetadataKey) and (
                value is None or isinstance(value, GroupMetadataValue)
            )
            self.classic.replay_group_metadata(key, value)

    def _replay_consumer(self, record: CoordinatorRecord) -> None:
        key = consumer_records.decode_key(record.key)
        if self.calls.replayed(record):
            self.consumer.settled(key.group)  # its heartbeat applied it in memory when it wrote it
            return
        value = consumer_records.decode_value(key, record.value)
        if key.group in self.groups and key.type == consumer_records.GROUP_METADATA and value is not None:
            # The classic group of this id was replaced by the consumer group (an empty or "simple" one,
            # made by offsets replayed before this record).
            classic = self.groups[key.group]
            if classic.is_empty():
                self.classic.remove_group(classic)
        self.consumer.replay(key, value)

    @state_machine_call
    def on_loaded(self) -> None:
        """The log is loaded: timers start (coordinator.group.manager.on_loaded)."""
        self.classic.on_loaded()
        self.consumer.on_loaded()
        offsets = self.offsets.store.num_offsets()
        # One line per shard: only the shards that hold something are worth an info line.
        log.log(
            logging.INFO if self.groups or self.consumer.groups or offsets else logging.DEBUG,
            "loaded %d classic groups, %d consumer groups and %d offsets",
            len(self.groups),
            len(self.consumer.groups),
            offsets,
        )

    @state_machine_call
    def on_unloaded(self) -> None:
        """The shard is going away: parked requests are answered NOT_COORDINATOR, timers are cancelled."""
        self.classic.on_unloaded()
        self.consumer.on_unloaded()
