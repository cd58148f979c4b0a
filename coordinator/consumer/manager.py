"""The consumer groups of one shard (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe (Kafka's
GroupMetadataManager, its consumer-group half).

A pure state machine beside the classic one (coordinator.group.manager), sharing its `Calls`, clock and timer.
Group ids are one namespace: a consumer group and a classic group never share an id. An empty classic group is
replaced by a consumer group on a member's first heartbeat, and an empty consumer group by a classic group on a
JoinGroup (Kafka's offline migration). Groups with members migrate online (coordinator.consumer.migration): a
consumer-protocol member joining a classic group turns it into a consumer group whose classic members go on
through JoinGroup/SyncGroup/Heartbeat/LeaveGroup (`classic_join` and friends), and the group becomes classic
again when its last consumer-protocol member leaves (`_maybe_downgrade`).

A heartbeat (`heartbeat`) runs Kafka's steps (Kafka 4.1's GroupMetadataManager.consumerGroupHeartbeat): validate the request; get
or create the group and the member (static members by instance id); apply what the request changed; bump the
group epoch when the members' subscriptions, or the metadata of the topics they subscribe to, changed; compute a
new target assignment when the group epoch is ahead of the assignment epoch; move the member one step towards
its target (coordinator.consumer.group.reconcile); re-arm its session timer, and its rebalance timer while it
owes revocations. Its records (types 3, 5, 6, 7, 8 of `__consumer_offsets`, coordinator.consumer.records) are
applied in memory at once and the answer is released only once they are durable. They are pipelined as Kafka's
are: the group's next heartbeat runs on top of them without waiting; if an append fails, the group goes back to
what it was before the oldest of its writes still in flight (`_track`). Ours: a heartbeat that would bring a
waiting member nothing new is answered when that changes (`_hold`), and a new group is assigned once its
joins pause (the join window, `_maybe_compute_target`).

Topics come from a `TopicImage` (the data plane's topics: ids, partition counts, names); the target carries
topic ids, as the clients expect. Regular expressions (ConsumerGroupHeartbeat v1) are RE2 expressions matched
against whole topic names (google-re2's fullmatch, as Kafka's RE2J `matches()`), resolved when first seen and
again whenever the topics change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from coordinator.clock import Clock, Timer
from coordinator.group.effects import Calls, state_machine_call
from coordinator.group.events import (
    GroupRemoved,
    JoinPhaseCompleted,
    MemberInfo,
    MemberRemoved,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceStarted,
    RemovalCause,
    StaticMemberReplaced,
)
from coordinator.group.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, ClassicGroupMember
from coordinator.group.responses import heartbeat_response as classic_heartbeat_response
from coordinator.group.responses import join_response, leave_response, sync_response
from coordinator.group.settings import (
    CONSUMER_HEARTBEAT_INTERVAL,
    CONSUMER_SESSION_TIMEOUT,
    EXPANSION_TIMEOUT,
    REGISTRATION_TIMEOUT,
)
from coordinator.group.state import ClassicGroupState
from coordinator.records import CoordinatorRecord, GroupOfflineValue, new_group_offline_record
from protocol.build import ms
from protocol.consumer import assignment_partitions
from protocol.errors import ErrorCode

from . import records as rec
from .assignors import ASSIGNORS, MemberSpec, PartitionAssignorError
from .group import (
    EMPTY_ASSIGNMENT,
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberFenced,
    MemberState,
    held_since,
    is_subset,
    reconcile,
)
from .migration import (
    assignment_bytes,
    downgrade_allowed,
    parse_subscription,
    protocol_metadata,
    subscription_version,
    upgrade_allowed,
    upgrade_refusal,
)
from .records import ClassicMemberMetadata
from .responses import NO_AUTHORIZED_OPERATIONS, described_group_error, heartbeat_response

log = logging.getLogger(__name__)

MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


class TopicImage(Protocol):
    """The topics consumer groups are assigned from (the data plane's)."""

    @property
    def topics_version(self) -> int:
        """Moves whenever a topic is created, deleted or changes its partition count."""
        ...

    def topic_id(self, topic: str) -> uuid.UUID | None: ...

    def partition_count(self, topic: str) -> int | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def topic_names(self) -> Iterable[str]:
        """Every topic a regular expression may match (internal topics left out)."""
        ...


class ClassicGroups(Protocol):
    """The classic groups of the shard, as the consumer groups see them (implemented by the shard)."""

    @property
    def max_size(self) -> int:
        """group.max.size: a consumer group larger than this does not become a classic group."""
        ...

    def get(self, group_id: str) -> ClassicGroup | None: ...

    def remove_empty(self, group_id: str) -> list[CoordinatorRecord]:
        """Remove the empty classic group of that id now (back if the append fails); its tombstone."""
        ...

    def take(self, group_id: str) -> list[CoordinatorRecord]:
        """Remove the classic group (with members) of that id, which becomes a consumer group: its parked
        JoinGroup and SyncGroup requests are answered REBALANCE_IN_PROGRESS, its timers cancelled; back if the
        append fails. Its tombstone."""
        ...

    def install(self, group: ClassicGroup, reason: str, *, rebalance: bool = True) -> None:
        """A consumer group became this classic group: keep it (gone again if the append fails), write its
        record, start its members' sessions and (with `rebalance`) a rebalance."""
        ...


@dataclasses.dataclass(frozen=True)
class ConsumerGroupSettings:
    """Kafka's group.consumer.* broker settings, with Kafka's defaults."""

    enabled: bool = True  # "consumer" in group.coordinator.rebalance.protocols
    session_timeout_ms: int = 45000
    min_session_timeout_ms: int = 45000
    max_session_timeout_ms: int = 60000
    heartbeat_interval_ms: int = 5000
    min_heartbeat_interval_ms: int = 5000
    max_heartbeat_interval_ms: int = 15000
    max_size: int = 2**31 - 1
    assignment_interval_ms: int = 100  # group.consumer.assignment.interval.ms (KIP-1263)
    # Batching starts at batch_from_members members, with an interval growing with the group (1 ms per 5
    # members) up to assignment_interval_ms (reached at 500 members with the default 100 ms): a computation costs
    # ~5 us per member here, so batching bounds it to a few percent of a core, while smaller groups, where it
    # costs little, are assigned at every epoch as in Kafka 4.1 (a member whose target is held back learns it
    # only at its next heartbeat). members_per_assignment_ms 0: assignment_interval_ms whatever the size.
    members_per_assignment_ms: int = 5
    batch_from_members: int = 250
    # our windows (coordinator.group.windows), per group too: a static member whose session expires stays offline
    # with its partitions (registration); joiners of a Stable group are assigned together (expansion)
    registration_timeout_ms: int = 0
    expansion_timeout_ms: int = 0
    # ours (see "answers held while a member waits" below): a group whose members hold nothing is
    # assigned once its joins pause for join_window_ms; a heartbeat that would bring a waiting member nothing new
    # is answered when that changes, at most heartbeat_hold_ms (and a quarter of the heartbeat interval) later.
    # 0: Kafka's behaviour (the join window needs the hold).
    join_window_ms: int = 100
    heartbeat_hold_ms: int = 200
    assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.migration.policy (coordinator.consumer.migration)
    migration_policy: str = "bidirectional"

    @classmethod
    def from_config(cls, config: Any) -> ConsumerGroupSettings:
        def get(name: str, default: Any) -> Any:
            try:
                return config[name]
            except KeyError:
                return default

        protocols = get("group.coordinator.rebalance.protocols", "classic,consumer")
        assignors = get("group.consumer.assignors", "uniform,range")
        return cls(
            enabled="consumer" in _names(protocols),
            session_timeout_ms=int(get("group.consumer.session.timeout.ms", 45000)),
            min_session_timeout_ms=int(get("group.consumer.min.session.timeout.ms", 45000)),
            max_session_timeout_ms=int(get("group.consumer.max.session.timeout.ms", 60000)),
            heartbeat_interval_ms=int(get("group.consumer.heartbeat.interval.ms", 5000)),
            min_heartbeat_interval_ms=int(get("group.consumer.min.heartbeat.interval.ms", 5000)),
            max_heartbeat_interval_ms=int(get("group.consumer.max.heartbeat.interval.ms", 15000)),
            max_size=int(get("group.consumer.max.size", 2**31 - 1)),
            assignment_interval_ms=int(get("group.consumer.assignment.interval.ms", 100)),
            registration_timeout_ms=int(get("group.static.registration.timeout.ms", 0)),
            expansion_timeout_ms=int(get("group.expansion.timeout.ms", 0)),
            join_window_ms=int(get("group.consumer.join.window.ms", 100)),
            heartbeat_hold_ms=int(get("group.consumer.heartbeat.hold.ms", 200)),
            assignors=tuple(_names(assignors)) or ("uniform",),
            migration_policy=str(get("group.consumer.migration.policy", "bidirectional")).strip().lower(),
        )


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v).strip() for v in value]


def session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def assignment_key(group_id: str) -> str:
    """The target assignment held back by group.consumer.assignment.interval.ms."""
    return f"consumer-assignment-{group_id}"


def registration_key(group_id: str) -> str:
    """The end of a consumer group's registration window."""
    return f"consumer-registration-{group_id}"


def join_key(group_id: str, member_id: str) -> str:
    """A classic member told to rejoin must send its JoinGroup within its rebalance timeout."""
    return f"consumer-join-{group_id}-{member_id}"


def sync_key(group_id: str, member_id: str) -> str:
    """A classic member that joined must send its SyncGroup within its rebalance timeout."""
    return f"consumer-sync-{group_id}-{member_id}"


def hold_key(group_id: str, member_id: str) -> str:
    """A member's heartbeat answer held while it waits (group.consumer.heartbeat.hold.ms)."""
    return f"consumer-hold-{group_id}-{member_id}"


# The join window closes at the latest this many windows after the first join, or three quarters of the heartbeat
# interval after it if that is longer; after the group's first target, a pause in joins of YOUNG_GROUP_WINDOWS
# windows closes it.
JOIN_WINDOW_MAX_WINDOWS = 20
YOUNG_GROUP_WINDOWS = 3


def join_window_limit_ms(window_ms: int, heartbeat_interval_ms: int) -> int:
    """How long after a new group's first join its join window closes at the latest (0: no window). Clients
    starting together on a busy machine send their first heartbeats over seconds (500 librdkafka consumers on two
    cores: over up to 4.4 s); a join after the limit moves partitions again, and a member told to give some up
    learns it at its next heartbeat, up to an interval later, so the limit stretches to most of an interval, and
    not all of it: a joiner's answer may be held that long, and a client that rejoins after it was fenced times
    its heartbeat out after one interval."""
    if window_ms <= 0:
        return 0
    return max(JOIN_WINDOW_MAX_WINDOWS * window_ms, heartbeat_interval_ms * 3 // 4)


@dataclasses.dataclass(slots=True)
class _Held:
    """A heartbeat whose answer is held: its token, and the assignment the member had before it."""

    token: object
    before: Assignment


@dataclasses.dataclass(slots=True)
class _HeldGroup:
    """A group's held answers, and the partitions their members wait for (of the target at `epoch`)."""

    members: dict[str, _Held] = dataclasses.field(default_factory=dict)
    epoch: int = -1
    awaited: dict[tuple[uuid.UUID, int], str] = dataclasses.field(default_factory=dict)


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def _owned(request: Any) -> dict[uuid.UUID, frozenset[int]] | None:
    if request.topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in request.topic_partitions:
        if tp.topic_id is not None:
            owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(
                int(p) for p in tp.partitions
            )
    return owned


def _wire_assignment(assignment: Assignment) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items()) if ps
        ]
    }


class ConsumerGroupManager:
    """The consumer groups of one shard (see the module doc)."""

    def __init__(
        self,
        calls: Calls,
        clock: Clock,
        timer: Timer,
        settings: ConsumerGroupSettings,
        topics: TopicImage | None,
        *,
        classic: ClassicGroups | None = None,
        withholds: Callable[[str, str], bool] = lambda group_id, topic: False,
        group_setting: Callable[[str, str], int | None] = lambda group_id, name: None,
        new_uuid: Callable[[], str] | None = None,
    ) -> None:
        """`classic`: the classic groups of the shard (their ids are the same namespace), for the migrations.
        `withholds(group_id, topic)`: whether the coordinator-side pause (coordinator.group.pause) keeps the
        topic's partitions from the group. `group_setting(group_id, name)`: the group's own value of a per-group
        setting (coordinator.group.settings), None if it has none."""
        self.calls = calls
        self.clock = clock
        self.timer = timer
        self.settings = settings
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}
        self._classic = classic
        # consumer groups turned into classic groups by the call under way (their undo puts them back: _track)
        self._downgraded: dict[str, ConsumerGroup] = {}
        self._withholds = withholds
        self._group_setting = group_setting
        self._new_uuid = new_uuid or (lambda: str(uuid.uuid4()))
        # GroupOffline records read while loading: group -> member id -> offline since (wall ms); applied in
        # on_loaded to the consumer groups loaded (the classic manager applies them to classic groups).
        self.loaded_offline: dict[str, dict[str, int]] = {}
        # heartbeats whose answers are held (group.consumer.heartbeat.hold.ms), by group
        self._held: dict[str, _HeldGroup] = {}

    @property
    def serving(self) -> bool:
        """Whether ConsumerGroupHeartbeat can be served (the protocol is on and topics are known here)."""
        return self.settings.enabled and self.topics is not None

    # ========================================================================================================
    # ConsumerGroupHeartbeat
    # ========================================================================================================

    @state_machine_call
    def heartbeat(
        self, token: object, api_version: int, request: Any, *, client_id: str = "", client_host: str = ""
    ) -> None:
        """ConsumerGroupHeartbeat v0-v1."""
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = heartbeat_response
        if not self.serving:
            self.calls.respond(
                token,
                heartbeat_response(
                    ErrorCode.unsupported_version,
                    "the consumer group protocol is not enabled on this coordinator "
                    "(group.coordinator.rebalance.protocols); use group.protocol=classic"
                    if not self.settings.enabled
                    else "this shard has no topics to assign from; use group.protocol=classic",
                ),
            )
            return
        group = self.groups.get(request.group_id)
        # the state to go back to if this call's write fails, when no earlier write of the group is in flight
        # (then the oldest one's is; see _track), or if the assignor fails
        snapshot = None if group is None or group.inflight else group.snapshot()
        created = group is None
        state_before = None if group is None else group.state
        offline_before = 0 if group is None else len(group.offline)
        waits: Assignment | None = None  # what the member had, if its answer may be held
        held_group = self._held.get(request.group_id)
        if group is not None and held_group is not None and request.member_id in held_group.members:
            # its earlier heartbeat is answered first, as it stands (no step: this one may be refused, and a
            # refused heartbeat writes nothing)
            self._release(group, request.member_id, force=True, step=False)
        try:
            self._validate(api_version, request)
            if request.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
                answer = self._leave(request)
            else:
                answer, waits = self._heartbeat(api_version, request, client_id, client_host)
        except (HeartbeatError, PartitionAssignorError) as exc:
            if isinstance(exc, HeartbeatError):
                answer = heartbeat_response(exc.code, exc.message)
            else:
                log.warning("group %s: the assignor failed: %s", request.group_id, exc)
                answer = heartbeat_response(ErrorCode.unknown_server_error, f"the assignor failed: {exc}")
            # A refused heartbeat changes nothing: what it did before the refusal is undone, unwritten.
            for hook in fx.failure_hooks:
                hook(answer.error_code)
            fx.failure_hooks.clear()
            fx.records.clear()
            if created:
                self.groups.pop(request.group_id, None)
            elif group is not None and snapshot is not None and isinstance(exc, PartitionAssignorError):
                group.restore(snapshot)  # (a HeartbeatError is raised before anything changes)
        else:
            if group is not None and len(group.offline) != offline_before:
                self._write_offline_marks(group)  # an offline member came back, or was replaced or left
        group = self.groups.get(request.group_id)
        held = (
            waits is not None
            and group is not None
            and self._hold(token, group, answer.member_id, waits, joining=request.member_epoch == 0)
        )
        if group is not None:
            self._wake(group)
        if self.calls.listeners:
            self._emit_if_stable(group, state_before)
        self._track(request.group_id, snapshot)
        if not held:
            self.calls.respond(token, answer)

    # -- writes in flight ------------------------------------------------------------------------------------
    #
    # A group's records are pipelined (coordinator.records): its next heartbeat runs on top of writes not yet
    # durable, and answers after them. So a failed append is undone to the state before the oldest write of the
    # group still in flight (`base`), as Kafka reverts to its last committed snapshot: writes made on top of the
    # failed one are undone with it (their members are fenced at their next heartbeat if their answers went out).

    def _track(self, group_id: str, snapshot: tuple[object, ...] | None) -> None:
        """The call that is ending wrote the group's records: count them in flight, and undo to the group's base
        (`snapshot`, the state before the call, when nothing was in flight; None: the group did not exist) if
        the append fails."""
        fx = self.calls.fx
        written = sum(1 for r in fx.records if rec.is_consumer_record(r.key))
        downgraded = self._downgraded.pop(group_id, None)
        if downgraded is not None and downgraded.offline:
            # a classic group now: its loading would apply the consumer group's offline marks to its members
            fx.records.append(new_group_offline_record(group_id, {}))
        group = self.groups.get(group_id) or downgraded
        if not written or group is None:
            return
        if group.inflight == 0:
            group.base, group.base_absent = snapshot, snapshot is None
        group.inflight += written

        def undo(error: ErrorCode) -> dict[object, Any]:
            if downgraded is not None and group_id not in self.groups:
                # (the classic group it became is gone: ClassicGroups.install)
                self.groups[group_id] = downgraded
            current = self.groups.get(group_id)
            if current is None or current is not group or current.inflight == 0:
                return {}  # undone already, with an earlier write of the group that failed
            base, absent = current.base, current.base_absent
            current.inflight, current.base, current.base_absent = 0, None, False
            if absent:  # the group came to exist in a write that failed
                self._cancel_timers(current)
                del self.groups[group_id]
                return {}
            if base is None:  # pragma: no cover - counts thrown off by writes settling after an undo
                return {}
            current.restore(base)
            for member_id in current.members:  # members removed by the failed write are back, with sessions
                if not self.timer.is_scheduled(session_key(group_id, member_id)) or downgraded is not None:
                    self._schedule_session_timeout(group_id, member_id)
            log.warning(
                "group %s: a write failed (%s): back to group epoch %d",
                group_id,
                error.name,
                current.group_epoch,
            )
            return {}

        fx.failure_hooks.append(undo)

    def settled(self, group_id: str) -> None:
        """One of the group's records is durable (replayed by the runtime)."""
        group = self.groups.get(group_id)
        if group is not None and group.inflight > 0:
            group.inflight -= 1
            if group.inflight == 0:
                group.base, group.base_absent = None, False

    def _validate(self, api_version: int, request: Any) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        epoch = request.member_epoch
        member_id = request.member_id
        if not member_id and (api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_EPOCH):
            raise HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
        if not request.group_id:
            raise HeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
        if request.instance_id == "":
            raise HeartbeatError(ErrorCode.invalid_request, "InstanceId can't be empty.")
        if request.rack_id == "":
            raise HeartbeatError(ErrorCode.invalid_request, "RackId can't be empty.")
        regex = getattr(request, "subscribed_topic_regex", None)
        if epoch == 0:
            if ms(request.rebalance_timeout) == -1:
                raise HeartbeatError(
                    ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request."
                )
            if request.topic_partitions is None or len(request.topic_partitions) > 0:
                raise HeartbeatError(
                    ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."
                )
            if request.subscribed_topic_names is None and regex is None:
                raise HeartbeatError(
                    ErrorCode.invalid_request,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif epoch == LEAVE_GROUP_STATIC_EPOCH:
            if request.instance_id is None:
                raise HeartbeatError(
                    ErrorCode.invalid_request, "InstanceId can't be null when MemberEpoch is -2."
                )
        elif epoch < LEAVE_GROUP_STATIC_EPOCH:
            raise HeartbeatError(ErrorCode.invalid_request, f"MemberEpoch is invalid: {epoch}.")
        if request.server_assignor is not None and request.server_assignor not in self.settings.assignors:
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.settings.assignors)}.",
            )

    # -- joining and heartbeating ----------------------------------------------------------------------------

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = None if self._classic is None else self._classic.get(group_id)
        if classic is not None and create:
            if classic.is_empty():
                self.calls.fx.records.extend(self._classic_side.remove_empty(group_id))
                log.info("group %s: the empty classic group is replaced by a consumer group", group_id)
            else:
                return self._upgrade(classic)
        elif classic is not None:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        elif not create:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    @property
    def _classic_side(self) -> ClassicGroups:
        assert self._classic is not None
        return self._classic

    # -- online migration (coordinator.consumer.migration) ---------------------------------------------------

    def _upgrade(self, classic: ClassicGroup) -> ConsumerGroup:
        """A consumer-protocol member joins a classic group with members: the group becomes a consumer group
        (Kafka's convertToConsumerGroup). Every classic member stays, STABLE at the classic generation with
        the partitions the classic assignment gave it, and goes on through JoinGroup/SyncGroup/Heartbeat; the
        heartbeat that asked goes on as a join of the consumer group."""
        group_id = classic.group_id
        refusal = (
            "group.consumer.migration.policy does not allow upgrades"
            if not upgrade_allowed(self.settings.migration_policy)
            else upgrade_refusal(classic, self.settings.max_size)
        )
        if refusal is not None:
            log.warning(
                "group %s: a consumer-protocol member cannot join the classic group: %s", group_id, refusal
            )
            raise HeartbeatError(
                ErrorCode.group_id_not_found,
                f"Group {group_id} is a classic group with members that cannot become a consumer group: "
                f"{refusal}.",
            )
        fx = self.calls.fx
        fx.records.extend(self._classic_side.take(group_id))
        group = self.groups[group_id] = ConsumerGroup(group_id)
        epoch = classic.generation_id
        group.group_epoch = group.assignment_epoch = epoch
        for old in classic.all_members():
            metadata = protocol_metadata(old.protocols, classic.protocol_name) or b""
            subscription = parse_subscription(metadata)  # (upgrade_refusal parsed every one)
            assigned = self._ids(assignment_partitions(old.assignment) or {})
            member = ConsumerMember(
                old.member_id,
                instance_id=old.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=old.client_id,
                client_host=old.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=old.rebalance_timeout_ms,
                member_epoch=epoch,
                previous_member_epoch=epoch,
                assigned=assigned,
                classic=ClassicMemberMetadata(old.session_timeout_ms, old.protocols),
            )
            group.update_member(member)
            group.target[member.member_id] = assigned
        self._refresh_subscription(group, bump=False, count_bumped=True)
        members = sorted(group.members.values(), key=lambda m: m.member_id)
        fx.records.extend(self._member_metadata_record(group_id, m) for m in members)
        fx.records.append(self._group_metadata_record(group))
        fx.records.extend(self._target_member_record(group_id, m.member_id) for m in members)
        fx.records.append(self._target_metadata_record(group))
        fx.records.extend(self._current_assignment_record(group_id, m) for m in members)
        for member in members:
            self._schedule_session_timeout(group_id, member.member_id)
        log.info(
            "group %s: the classic group of generation %d with %d members became a consumer group",
            group_id,
            epoch,
            len(members),
        )
        return group

    def _ids(self, partitions: Mapping[str, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
        """Partitions by topic name -> by topic id (topics unknown here left out)."""
        assert self.topics is not None
        result: dict[uuid.UUID, frozenset[int]] = {}
        for name, ps in partitions.items():
            topic_id = self.topics.topic_id(name)
            if topic_id is not None and ps:
                result[topic_id] = result.get(topic_id, frozenset()) | frozenset(ps)
        return result

    def _names(self, assignment: Assignment) -> dict[str, list[int]]:
        assert self.topics is not None
        result: dict[str, list[int]] = {}
        for topic_id, ps in assignment.items():
            name = self.topics.topic_name(topic_id)
            if name is not None and ps:
                result[name] = sorted(ps)
        return result

    def _maybe_downgrade(
        self,
        group: ConsumerGroup,
        leaving: Iterable[ConsumerMember],
        *,
        replaced_by: ConsumerMember | None = None,
        rebalance: bool = True,
    ) -> bool:
        """Members are about to leave or be fenced: when a consumer-protocol member is among them and every
        member staying uses the classic protocol, the group becomes a classic group instead (Kafka's online
        downgrade), at its group epoch as the generation, if the policy allows it and the group fits
        group.max.size. Whether it did (then the leaving members are gone with the consumer group).
        `replaced_by`: the leaving member is a static one already replaced by this classic member, which is in
        the group with its partitions; then a rebalance begins only with `rebalance` (its subscription changed)."""
        leaving = list(leaving)
        gone = {m.member_id for m in leaving}
        staying = [m for m in group.members.values() if m.member_id not in gone]
        if (
            self._classic is None
            or not downgrade_allowed(self.settings.migration_policy)
            or not staying
            or all(m.uses_classic_protocol for m in leaving)
            or not all(m.uses_classic_protocol for m in staying)
            or len(staying) > self._classic.max_size
        ):
            return False
        group_id = group.group_id
        classic = ClassicGroup(
            group_id,
            ClassicGroupState.STABLE,
            current_state_timestamp_ms=self.clock.wall_ms(),
            generation_id=group.group_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
        )
        try:
            for member in sorted(staying, key=lambda m: m.member_id):
                assert member.classic is not None
                classic.add(
                    ClassicGroupMember(
                        member.member_id,
                        member.instance_id,
                        member.client_id,
                        member.client_host,
                        member.rebalance_timeout_ms,
                        member.classic.session_timeout_ms,
                        CONSUMER_PROTOCOL_TYPE,
                        member.classic.protocols,
                    )
                )
        except ValueError:  # (the classic members share no protocol: they joined with different ones)
            return False
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        for classic_member in classic.all_members():
            classic_member.assignment = assignment_bytes(
                subscription_version(classic_member.metadata(classic.protocol_name)),
                self._names(group.target.get(classic_member.member_id, {})),
            )
        self.calls.fx.records.extend(self.group_tombstones(group))
        self._cancel_timers(group)
        if self.calls.listeners and replaced_by is None:  # (a replaced static member was reported so)
            now = (self.clock.wall_ms(), self.clock.monotonic_ms())
            for member in leaving:
                self.calls.emit(
                    MemberRemoved(group_id, _info(member), RemovalCause.LEFT, group.group_epoch, *now)
                )
        del self.groups[group_id]
        self._downgraded[group_id] = group
        if replaced_by is None:
            reason = (
                f"the last consumer-protocol member left consumer group {group_id}: it became a classic group"
            )
        else:
            reason = (
                f"static member {replaced_by.instance_id} joined consumer group {group_id} with the classic protocol "
                f"in place of its last consumer-protocol member: it became a classic group"
            )
        log.info("group %s: %s", group_id, reason)
        self._classic_side.install(classic, reason, rebalance=rebalance)
        return True

    def _heartbeat(
        self, api_version: int, request: Any, client_id: str, client_host: str
    ) -> tuple[Any, Assignment]:
        """The answer, and the assignment the member had before (for `_hold`)."""
        group_id = request.group_id
        epoch = request.member_epoch
        group = self._group_for(group_id, create=epoch == 0)
        member_id = request.member_id or self._new_uuid()
        owned = _owned(request)
        regex = getattr(request, "subscribed_topic_regex", None)

        member, replaced = self._member_for(group, request, member_id)
        group.offline.pop(member_id, None)  # (back inside its registration window)
        new_member = member_id not in group.members and replaced is None
        if new_member and len(group.members) >= self.settings.max_size:
            raise HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.",
            )

        updated = _with_heartbeat(member, request, regex, client_id, client_host)
        bump = group.group_epoch == 0 or new_member
        if (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        ):
            bump = True
        if (
            updated.subscribed_topic_regex is not None
            and updated.subscribed_topic_regex not in group.resolved
        ):
            self._compile(updated.subscribed_topic_regex)
        self._apply_member(group, member, updated, replaced, bump, new_member)

        member = group.members[member_id]
        target = group.target.get(member_id, {})
        try:
            next_member = reconcile(member, group.assignment_epoch, target, owned, group.owner)
        except MemberFenced as exc:
            raise HeartbeatError(ErrorCode.fenced_member_epoch, str(exc)) from None
        self._reconciled(group, member, next_member)

        full = (
            ms(request.rebalance_timeout) != -1
            and (request.subscribed_topic_names is not None or regex is not None)
            and owned is not None
        )
        # Kafka sends the assignment on a join, a full request, or a change. Ours: also until a heartbeat of the
        # member lists it (`group.unacked`), and whenever its heartbeat shows it has not taken it in (it lists other
        # partitions, or it still owes revocations). A client times a heartbeat out after one heartbeat interval
        # (librdkafka) and retries without a full request, so an answer lost that way would otherwise leave it
        # waiting for its rebalance timeout, or for partitions that nobody else is given; clients ignore an
        # assignment equal to the one they hold.
        acked = owned is not None and _same(owned, next_member.assigned)
        if acked:
            group.unacked.discard(member_id)
        stale = (
            next_member.state == MemberState.UNREVOKED_PARTITIONS
            or (owned is not None and not acked)
            or member_id in group.unacked
        )
        changed = next_member.assigned != member.assigned
        send_assignment = epoch == 0 or full or stale or changed
        if changed and not acked:
            group.unacked.add(member_id)
        answer = self._answer(group, next_member, next_member.assigned if send_assignment else None)
        # (a join knows of nothing it holds: a member rejoining with partitions is sent them at once)
        return answer, EMPTY_ASSIGNMENT if epoch == 0 else member.assigned

    def _reconciled(self, group: ConsumerGroup, member: ConsumerMember, next_member: ConsumerMember) -> None:
        """The member moved a step (or not): its record if it changed, its rebalance timer (running only while
        revocations are owed, from the step that asked for them), its session timer re-armed."""
        group_id, member_id = group.group_id, member.member_id
        if next_member != member:
            group.update_member(next_member)
            self.calls.fx.records.append(self._current_assignment_record(group_id, next_member))
            if next_member.state == MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group, next_member)
            else:
                self.timer.cancel(rebalance_key(group_id, member_id))
        self._schedule_session_timeout(group_id, member_id)

    def _apply_member(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        updated: ConsumerMember,
        replaced: ConsumerMember | None,
        bump: bool,
        new_member: bool,
    ) -> None:
        """Put a member's new state in the group (a heartbeat's or a classic JoinGroup's): the static member it
        replaces out, its record if it changed, a group epoch bump if due, the target if the epoch is ahead of it
        (Kafka's steps 3-6)."""
        fx = self.calls.fx
        group_id = group.group_id
        if replaced is not None:
            self._replace_static(group, replaced, updated)
        if _metadata_changed(member, updated) or updated.member_id not in group.members:
            fx.records.append(self._member_metadata_record(group_id, updated))
        if group.members.get(updated.member_id) is not updated:  # (a heartbeat that changes nothing: it is)
            group.update_member(updated)
        if replaced is not None:
            group.target[updated.member_id] = group.target.pop(replaced.member_id, {})
            fx.records.append(self._target_member_record(group_id, updated.member_id))
            fx.records.append(self._current_assignment_record(group_id, updated))
        self._refresh_subscription(
            group,
            bump,
            reason=RebalanceReason.NEW_MEMBER if new_member else RebalanceReason.METADATA_CHANGE,
            member=updated,
        )
        # a consumer-protocol member whose heartbeat computes the target is handed what nobody keeps first: it
        # learns of it in this answer (a classic member would be sent into a rebalance for it)
        self._maybe_compute_target(group, updated.member_id if updated.classic is None else None)

    def _answer(self, group: ConsumerGroup, member: ConsumerMember, assignment: Assignment | None) -> Any:
        return heartbeat_response(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms(group),
            assignment=None if assignment is None else _wire_assignment(assignment),
        )

    def _own(self, group_id: str, name: str, default: int) -> int:
        """A per-group setting: the group's own value (consumer.session.timeout.ms, ...), else the server's."""
        value = self._group_setting(group_id, name)
        return default if value is None else value

    def validate_group_settings(self, values: Mapping[str, int]) -> str | None:
        """Why a group's own values of consumer.session.timeout.ms and consumer.heartbeat.interval.ms are refused
        (Kafka's bounds: group.consumer.min/max.*), None if they are not."""
        s = self.settings
        session = values.get(CONSUMER_SESSION_TIMEOUT)
        if session is not None and not s.min_session_timeout_ms <= session <= s.max_session_timeout_ms:
            return (
                f"{CONSUMER_SESSION_TIMEOUT} must be from group.consumer.min.session.timeout.ms "
                f"({s.min_session_timeout_ms}) to group.consumer.max.session.timeout.ms ({s.max_session_timeout_ms})"
            )
        interval = values.get(CONSUMER_HEARTBEAT_INTERVAL)
        if (
            interval is not None
            and not s.min_heartbeat_interval_ms <= interval <= s.max_heartbeat_interval_ms
        ):
            return (
                f"{CONSUMER_HEARTBEAT_INTERVAL} must be from group.consumer.min.heartbeat.interval.ms "
                f"({s.min_heartbeat_interval_ms}) to group.consumer.max.heartbeat.interval.ms "
                f"({s.max_heartbeat_interval_ms})"
            )
        if (session or s.session_timeout_ms) <= (interval or s.heartbeat_interval_ms):
            return f"{CONSUMER_HEARTBEAT_INTERVAL} must be below {CONSUMER_SESSION_TIMEOUT}"
        return None

    def _heartbeat_interval_ms(self, group: ConsumerGroup) -> int:
        """group.consumer.heartbeat.interval.ms, or the group's own consumer.heartbeat.interval.ms. (Never
        shortened to bring a member back sooner: librdkafka times a heartbeat out after one interval.)"""
        return self._own(group.group_id, CONSUMER_HEARTBEAT_INTERVAL, self.settings.heartbeat_interval_ms)

    def _member_for(
        self, group: ConsumerGroup, request: Any, member_id: str
    ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member the heartbeat is about (a new one at epoch 0), and the static member it replaces."""
        epoch = request.member_epoch
        instance_id = request.instance_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if epoch != 0:
                    raise HeartbeatError(
                        ErrorCode.unknown_member_id,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                return ConsumerMember(member_id), None
            self._check_epoch(member, epoch, request)
            return member, None
        old = group.static_member(instance_id)
        if epoch == 0:
            if old is None or old.member_id == member_id:
                existing = group.members.get(member_id)
                if existing is not None:
                    return existing, None
                return ConsumerMember(member_id, instance_id=instance_id), None
            if old.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
                raise HeartbeatError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {old.member_id} with instance id {instance_id} is present in the group "
                    "and has not left it.",
                )
            # The static member comes back under a new member id: it takes the old member's place.
            return (
                dataclasses.replace(
                    old,
                    member_id=member_id,
                    member_epoch=0,
                    previous_member_epoch=0,
                    state=MemberState.STABLE,
                    pending_revocation={},
                ),
                old,
            )
        if old is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Instance id {instance_id} is unknown in group {group.group_id}.",
            )
        if old.member_id != member_id:
            raise HeartbeatError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by {old.member_id}.",
            )
        self._check_epoch(old, epoch, request)
        return old, None

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, request: Any) -> None:
        """Kafka's throwIfMemberEpochIsInvalid; an epoch-0 rejoin of a known member is accepted (Kafka 4.3,
        KAFKA-19233): it keeps its assignment and is sent it in full."""
        if epoch == 0:
            return
        if epoch > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({epoch}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if epoch < member.member_epoch and not (
            epoch == member.previous_member_epoch and is_subset(_owned(request), member.assigned)
        ):
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )

    def _replace_static(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> None:
        fx = self.calls.fx
        group_id = group.group_id
        log.info(
            "group %s: static member %s (instance %s) rejoined as %s",
            group_id,
            old.member_id,
            old.instance_id,
            new.member_id,
        )
        fx.records.extend(self._member_tombstones(group_id, old.member_id))
        if self.calls.listeners and old.instance_id is not None:
            self.calls.emit(
                StaticMemberReplaced(
                    group_id, old.instance_id, old.member_id, new.member_id, self.clock.wall_ms()
                )
            )
        target = group.target.get(old.member_id, {})
        group.remove_member(old.member_id)
        group.target[old.member_id] = target  # moved to the new id by the caller
        self._cancel_member_timers(group_id, old.member_id)

    # -- answers held while a member waits ------------------------------------------------------------------
    #
    # Ours (group.consumer.heartbeat.hold.ms). A member learns of partitions only from a heartbeat's answer, and a
    # client heartbeats once per interval: a member whose partitions are still being given up by another, or
    # whose target is held back for a moment (the join window, the assignment interval), would learn of them a
    # whole interval later. Its answer is held instead, when it would bring nothing new, until that changes (the
    # partitions are freed, a target is computed) or the hold ends, and is then what a heartbeat at that moment
    # would be answered. An answer that asks for revocations or hands out partitions is never held. The hold is
    # at most a quarter of the heartbeat interval: librdkafka times a heartbeat out after one interval.

    def _hold_ms(self, group: ConsumerGroup) -> int:
        return min(self.settings.heartbeat_hold_ms, self._heartbeat_interval_ms(group) // 4)

    def _join_window_max_ms(self, group: ConsumerGroup) -> int:
        return join_window_limit_ms(self.settings.join_window_ms, self._heartbeat_interval_ms(group))

    def _join_window(self, group: ConsumerGroup, now: int) -> tuple[int, int] | None:
        """The group's join window: the pause in joins that closes it (ms) and when it closes at the latest
        (monotonic ms); None if it is not in one. A group whose members hold nothing opens it with its first
        join. Joins that keep coming after its first target are batched the same way until the window's limit,
        each target computed on the way making the members holding partitions give some up: these clients have
        paused for longer than the window, so the pause that closes it is three windows."""
        window = self.settings.join_window_ms
        if not group.joins_only or window <= 0 or self._hold_ms(group) <= 0:
            return None
        forming = group.forming_from_ms
        if forming is not None and not group.owners:
            return window, forming + self._join_window_max_ms(group)
        young = group.young_until_ms
        if young is not None and now < young:
            return YOUNG_GROUP_WINDOWS * window, young
        return None

    def _waiting(self, group: ConsumerGroup, member: ConsumerMember, before: Assignment) -> bool:
        """Whether the member's answer brings it nothing new while it waits for partitions or a target."""
        if member.classic is not None or member.state == MemberState.UNREVOKED_PARTITIONS:
            return False
        if member.assigned != before:
            return False
        return member.state == MemberState.UNRELEASED_PARTITIONS or group.group_epoch > group.assignment_epoch

    def _hold(
        self, token: object, group: ConsumerGroup, member_id: str, before: Assignment, *, joining: bool
    ) -> bool:
        """Hold the answer of the heartbeat that is ending if the member waits (see above); True if held. A
        joiner of a group in its join window waits for the window's end (a client's first heartbeat is timed out
        after its session timeout, not an interval). Any other joiner that waits, and any member waiting for the
        target its group's join window holds back, waits as long as the window's limit, at most half an interval
        (a client times a later heartbeat out after one interval): a member that must give partitions up learns
        it when the window's target is computed, and a joiner is given the partitions being freed for it as they
        are, rather than either of them at its next heartbeat, one interval later."""
        hold_ms = self._hold_ms(group)
        member = group.members.get(member_id)
        if hold_ms <= 0 or member is None or not self._waiting(group, member, before):
            return False  # (every heartbeat comes here: the window is looked at only for a waiting member)
        in_window = self._join_window(group, self.clock.monotonic_ms()) is not None
        if joining and in_window:
            hold_ms = max(hold_ms, self._join_window_max_ms(group))  # (released when the target is computed)
        elif joining or in_window:
            limit = min(self._join_window_max_ms(group), self._heartbeat_interval_ms(group) // 2)
            hold_ms = max(hold_ms, limit)
        group_id = group.group_id
        held_group = self._held.get(group_id)
        if held_group is None:
            held_group = self._held[group_id] = _HeldGroup(epoch=group.assignment_epoch)
        held_group.members[member_id] = _Held(token, before)
        if held_group.epoch == group.assignment_epoch:
            self._await(group, held_group, member)
        self.timer.schedule(
            hold_key(group_id, member_id),
            hold_ms,
            self.calls.op(self._hold_ended, group_id, member_id, token),
        )

        def failed(error: ErrorCode) -> dict[object, Any]:
            # the heartbeat's own write failed: its answer, held, is the error
            if self._held_token(group_id, member_id) is token:
                self._forget_held(group_id, member_id)
                self.calls.respond(token, heartbeat_response(error))
            return {}

        self.calls.fx.failure_hooks.append(failed)
        return True

    def _held_token(self, group_id: str, member_id: str) -> object:
        held_group = self._held.get(group_id)
        held = None if held_group is None else held_group.members.get(member_id)
        return None if held is None else held.token

    @staticmethod
    def _await(group: ConsumerGroup, held_group: _HeldGroup, member: ConsumerMember) -> None:
        """Note the partitions of the member's target it does not have yet."""
        for t, ps in group.target.get(member.member_id, EMPTY_ASSIGNMENT).items():
            have = member.assigned.get(t, frozenset())
            for p in ps:
                if p not in have:
                    held_group.awaited[(t, p)] = member.member_id

    def _wake(self, group: ConsumerGroup) -> None:
        """Answer the group's held heartbeats whose members have something new: every one after a new target,
        those waiting for a partition freed since the last look otherwise."""
        freed, group.freed = group.freed, set()
        held_group = self._held.get(group.group_id)
        if held_group is None:
            return
        if held_group.epoch != group.assignment_epoch:
            for member_id in list(held_group.members):
                self._release(group, member_id, force=False)
            held_group.epoch = group.assignment_epoch
            held_group.awaited = {}
            for member_id in held_group.members:
                member = group.members.get(member_id)
                if member is not None:
                    self._await(group, held_group, member)
            return
        for tp in freed:
            waiting = held_group.awaited.get(tp)
            if waiting is not None and waiting in held_group.members:
                self._release(group, waiting, force=False)

    def _release(self, group: ConsumerGroup, member_id: str, *, force: bool, step: bool = True) -> None:
        """The member's held heartbeat moves it one step as a heartbeat would now, and is answered unless it
        still waits (`force`: answered whatever; without `step`, with the member as it is)."""
        group_id = group.group_id
        h = self._held[group_id].members[member_id]
        member = group.members.get(member_id)
        if member is None:
            answer = heartbeat_response(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}."
            )
        elif not step:
            answer = self._answer(group, member, member.assigned)
        else:
            try:
                next_member = reconcile(
                    member, group.assignment_epoch, group.target.get(member_id, {}), None, group.owner
                )
            except MemberFenced as exc:
                answer = heartbeat_response(ErrorCode.fenced_member_epoch, str(exc))
            else:
                if not force and self._waiting(group, next_member, h.before):
                    return  # still nothing new: the step is taken (and written) when the answer goes
                self._reconciled(group, member, next_member)
                if next_member.assigned != h.before:
                    group.unacked.add(member_id)  # (sent until a heartbeat lists it, as in _heartbeat)
                answer = self._answer(group, next_member, next_member.assigned)
        self._forget_held(group_id, member_id)
        token = h.token
        self.calls.respond(token, answer)
        # if this call's write fails, the answer released with it is the error
        self.calls.fx.failure_hooks.append(lambda error: {token: heartbeat_response(error)})

    def _forget_held(self, group_id: str, member_id: str) -> None:
        held_group = self._held.get(group_id)
        if held_group is not None and held_group.members.pop(member_id, None) is not None:
            self.timer.cancel(hold_key(group_id, member_id))
            if not held_group.members:
                del self._held[group_id]

    def _hold_ended(self, group_id: str, member_id: str, token: object) -> None:
        """The hold ran out (a call of its own): the answer goes as it is now. A group never assigned yet is
        assigned first, so that a joiner is not answered with epoch 0."""
        if self._held_token(group_id, member_id) is not token:
            return
        group = self.groups.get(group_id)
        if group is None:  # (gone meanwhile: undone, deleted)
            self._forget_held(group_id, member_id)
            self.calls.respond(
                token,
                heartbeat_response(ErrorCode.unknown_member_id, f"Group {group_id} has no such member."),
            )
            return
        snapshot = None if group.inflight else group.snapshot()
        state_before = group.state
        if group.assignment_epoch == 0 and group.group_epoch > 0 and group.members:
            self._compute_target_or_undo(group, snapshot)
        self._release(group, member_id, force=True)
        self._wake(group)
        if self.calls.listeners:
            self._emit_if_stable(group, state_before)
        self._track(group_id, snapshot)

    # -- leaving ---------------------------------------------------------------------------------------------

    def _leave(self, request: Any) -> Any:
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is None:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Member {request.member_id} is not a member of group {group_id}.",
                )
        else:
            member = group.static_member(request.instance_id)
            if member is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Instance id {request.instance_id} is unknown in group {group_id}.",
                )
            if member.member_id != request.member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {request.member_id} with instance id {request.instance_id} was fenced by "
                    f"{member.member_id}.",
                )
        if request.member_epoch == LEAVE_GROUP_STATIC_EPOCH and member.instance_id is not None:
            left = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_EPOCH, pending_revocation={})
            group.update_member(left)
            self.calls.fx.records.append(self._current_assignment_record(group_id, left))
            self.timer.cancel(rebalance_key(group_id, member.member_id))
            log.info("group %s: static member %s left temporarily", group_id, member.member_id)
            return heartbeat_response(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_EPOCH)
        if not self._maybe_downgrade(group, (member,)):
            self._remove_member(
                group, member.member_id, "left the group", RemovalCause.LEFT, RebalanceReason.LEAVE
            )
        return heartbeat_response(member_id=member.member_id, member_epoch=LEAVE_GROUP_EPOCH)

    def _remove_member(
        self, group: ConsumerGroup, member_id: str, why: str, cause: RemovalCause, reason: RebalanceReason
    ) -> ConsumerMember | None:
        """Fence a member: its three tombstones, and a group epoch bump (Kafka's removeMember)."""
        fx = self.calls.fx
        group_id = group.group_id
        fx.records.extend(self._member_tombstones(group_id, member_id))
        removed = group.remove_member(member_id)
        self._cancel_member_timers(group_id, member_id)
        state_before = group.state
        self._note_bump(group, joined=False)
        group.group_epoch += 1
        self._refresh_subscription(group, bump=False, count_bumped=True)
        fx.records.append(self._group_metadata_record(group))
        log.info("group %s: member %s %s; group epoch %d", group_id, member_id, why, group.group_epoch)
        if self.calls.listeners and removed is not None:
            now = (self.clock.wall_ms(), self.clock.monotonic_ms())
            info = _info(removed)
            self.calls.emit(MemberRemoved(group_id, info, cause, group.group_epoch - 1, *now))
            self._emit_started(group, state_before, reason, info, f"member {member_id} {why}")
        return removed

    def _member_tombstones(self, group_id: str, member_id: str) -> list[CoordinatorRecord]:
        return [
            rec.record(rec.ConsumerRecordKey(rec.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
            rec.record(rec.ConsumerRecordKey(rec.TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
            rec.record(rec.ConsumerRecordKey(rec.MEMBER_METADATA, group_id, member_id), None),
        ]

    # -- timers ----------------------------------------------------------------------------------------------

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        """group.consumer.session.timeout.ms; a classic member's own session timeout (from its JoinGroup)."""
        member = self.groups[group_id].members.get(member_id) if group_id in self.groups else None
        classic = None if member is None else member.classic
        self.timer.schedule(
            session_key(group_id, member_id),
            self._own(group_id, CONSUMER_SESSION_TIMEOUT, self.settings.session_timeout_ms)
            if classic is None
            else classic.session_timeout_ms,
            self.calls.op(self._session_expired, group_id, member_id),
        )

    def _session_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        member = group.members[member_id]
        window = self._own(group_id, REGISTRATION_TIMEOUT, self.settings.registration_timeout_ms)
        if member.instance_id is not None and window > 0 and member_id not in group.offline:
            self._go_offline(group, member)
            return
        self._expire(
            group,
            member_id,
            "was removed: its session timed out",
            RemovalCause.SESSION_TIMEOUT,
            RebalanceReason.SESSION_EXPIRY,
        )

    def _go_offline(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """The registration window (ours): a static member whose session expired keeps its place and its
        partitions, as after a leave with epoch -2, so that its instance coming back takes them back with no
        rebalance; when the earliest member still offline has been gone `window` ms, every offline member is
        removed with one group epoch bump. The offline members are written as a GroupOffline record, as a classic
        group's are, so that after a restart they are offline again and their window goes on."""
        group_id = group.group_id
        snapshot = None if group.inflight else group.snapshot()
        now = self.clock.monotonic_ms()
        group.offline[member.member_id] = now
        self._write_offline_marks(group)
        if member.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
            offline = dataclasses.replace(
                member, member_epoch=LEAVE_GROUP_STATIC_EPOCH, pending_revocation={}
            )
            group.update_member(offline)
            self.calls.fx.records.append(self._current_assignment_record(group_id, offline))
        self.timer.cancel(rebalance_key(group_id, member.member_id))
        log.info(
            "group %s: static member %s (instance %s) is offline; it keeps its partitions for the registration "
            "window",
            group_id,
            member.member_id,
            member.instance_id,
        )
        self._schedule_registration_end(group)
        self._track(group_id, snapshot)

    def _schedule_registration_end(self, group: ConsumerGroup) -> None:
        """The registration window ends when the earliest member still offline has been gone its length."""
        window = self._own(group.group_id, REGISTRATION_TIMEOUT, self.settings.registration_timeout_ms)
        end = min(group.offline.values()) + window
        self.timer.schedule(
            registration_key(group.group_id),
            max(end - self.clock.monotonic_ms(), 0),
            self.calls.op(self._registration_ended, group.group_id),
        )

    def _write_offline_marks(self, group: ConsumerGroup) -> None:
        """The group's offline static members and since when (wall-clock ms), as a GroupOffline record (none: a
        tombstone)."""
        now_mono, now_wall = self.clock.monotonic_ms(), self.clock.wall_ms()
        since = {member_id: now_wall - (now_mono - mono_ms) for member_id, mono_ms in group.offline.items()}
        self.calls.fx.records.append(new_group_offline_record(group.group_id, since))

    def _registration_ended(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        gone = [m for m in group.offline if m in group.members]
        if group.offline:
            group.offline.clear()
            self._write_offline_marks(group)  # a tombstone
        if not gone:
            return
        snapshot = None if group.inflight else group.snapshot()
        fx = self.calls.fx
        state_before = group.state
        for member_id in gone:
            fx.records.extend(self._member_tombstones(group_id, member_id))
            removed = group.remove_member(member_id)
            self._cancel_member_timers(group_id, member_id)
            if self.calls.listeners and removed is not None:
                now = (self.clock.wall_ms(), self.clock.monotonic_ms())
                self.calls.emit(
                    MemberRemoved(
                        group_id, _info(removed), RemovalCause.SESSION_TIMEOUT, group.group_epoch, *now
                    )
                )
        self._note_bump(group, joined=False)
        group.group_epoch += 1
        self._refresh_subscription(group, bump=False, count_bumped=True)
        fx.records.append(self._group_metadata_record(group))
        log.info(
            "group %s: the registration window ended: offline members %s removed; group epoch %d",
            group_id,
            gone,
            group.group_epoch,
        )
        if self.calls.listeners:
            self._emit_started(
                group,
                state_before,
                RebalanceReason.SESSION_EXPIRY,
                None,
                f"offline static members {gone} removed",
            )
        self._track(group_id, snapshot)

    def _expire(
        self, group: ConsumerGroup, member_id: str, why: str, cause: RemovalCause, reason: RebalanceReason
    ) -> None:
        """A timer removed the member (a timer operation is a call of its own)."""
        snapshot = None if group.inflight else group.snapshot()
        if not self._maybe_downgrade(group, (group.members[member_id],)):
            self._remove_member(group, member_id, why, cause, reason)
        self._track(group.group_id, snapshot)

    def _schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        timeout_ms = member.rebalance_timeout_ms if member.rebalance_timeout_ms >= 0 else 300_000
        self.timer.schedule(
            rebalance_key(group.group_id, member.member_id),
            timeout_ms,
            self.calls.op(self._rebalance_expired, group.group_id, member.member_id, member.member_epoch),
        )

    def _rebalance_expired(self, group_id: str, member_id: str, epoch: int) -> None:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        if member.state == MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            self._expire(
                group,
                member_id,
                "was removed: it did not revoke its partitions in time",
                RemovalCause.REBALANCE_TIMEOUT,
                RebalanceReason.REBALANCE_TIMEOUT,
            )

    def _cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(session_key(group_id, member_id))
        self.timer.cancel(rebalance_key(group_id, member_id))
        self.timer.cancel(join_key(group_id, member_id))
        self.timer.cancel(sync_key(group_id, member_id))

    def _cancel_timers(self, group: ConsumerGroup) -> None:
        self.timer.cancel(assignment_key(group.group_id))
        self.timer.cancel(registration_key(group.group_id))
        for member_id in group.members:
            self._cancel_member_timers(group.group_id, member_id)

    # -- subscriptions and the target assignment -------------------------------------------------------------

    def _compile(self, regex: str) -> None:
        try:
            import re2  # google-re2: RE2 syntax, as Kafka's RE2J

            re2.compile(regex)
        except Exception as exc:  # noqa: BLE001 - re2.error and friends: the expression is refused
            raise HeartbeatError(
                ErrorCode.invalid_regular_expression,
                f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
            ) from None

    def _resolve(self, group: ConsumerGroup) -> None:
        """Resolve every regex of the group against the current topics."""
        assert self.topics is not None
        regexes = group.subscribed_regexes()
        if not regexes:
            group.resolved = {}
            return
        import re2

        names = list(self.topics.topic_names())
        resolved: dict[str, frozenset[str]] = {}
        for regex in regexes:
            try:
                pattern = re2.compile(regex)
            except Exception:  # noqa: BLE001 - replayed from an older log: matches nothing
                resolved[regex] = frozenset()
                continue
            resolved[regex] = frozenset(n for n in names if pattern.fullmatch(n))
        group.resolved = resolved

    def _metadata_hash(self, group: ConsumerGroup) -> int:
        assert self.topics is not None
        digest = hashlib.blake2b(digest_size=8)
        for name in sorted(group.subscribed_topic_names()):
            topic_id = self.topics.topic_id(name)
            count = self.topics.partition_count(name)
            if topic_id is None or count is None:
                continue
            digest.update(f"{name}\0{topic_id}\0{count}\0".encode())
        return int.from_bytes(digest.digest(), "big", signed=True)

    def _refresh_subscription(
        self,
        group: ConsumerGroup,
        bump: bool,
        *,
        count_bumped: bool = False,
        reason: RebalanceReason = RebalanceReason.METADATA_CHANGE,
        member: ConsumerMember | None = None,
    ) -> None:
        """Resolve regexes and re-hash the subscribed topics' metadata when a bump is due or the topics changed
        since the group last looked; a changed hash bumps the group epoch too (written here, unless the
        caller bumped and writes it: `count_bumped`)."""
        assert self.topics is not None
        version = self.topics.topics_version
        # (a member's new regex is a subscription change: it comes with `bump`)
        if not bump and not count_bumped and version == group.image_version:
            return
        self._resolve(group)
        group.image_version = version
        new_hash = self._metadata_hash(group)
        if new_hash != group.metadata_hash:
            group.metadata_hash = new_hash
            if not count_bumped:
                bump = True
        if bump and not count_bumped:
            state_before = group.state
            self._note_bump(
                group,
                joined=reason == RebalanceReason.NEW_MEMBER,
                classic=member is not None and member.classic is not None,
            )
            group.group_epoch += 1
            self.calls.fx.records.append(self._group_metadata_record(group))
            log.debug("group %s: group epoch %d", group.group_id, group.group_epoch)
            if self.calls.listeners:
                self._emit_started(
                    group,
                    state_before,
                    reason,
                    None if member is None else _info(member),
                    f"group epoch {group.group_epoch}: {reason.value.replace('_', ' ')}",
                )

    def _note_bump(self, group: ConsumerGroup, *, joined: bool, classic: bool = False) -> None:
        """A group epoch bump (before it): the first join to a group whose target is current opens the expansion
        window, the first join (of a consumer-protocol member) to a group whose members hold nothing the join
        window; anything but joins closes both (a member gone or a change of topics is assigned without
        waiting). A group its last member left is formed anew by its next joins, as a new group is (a whole
        group restarted)."""
        if not joined:
            group.expansion_from_ms = None
            group.forming_from_ms = None
            group.young_until_ms = None
            group.joins_only = group.is_empty()
            return
        group.last_join_ms = self.clock.monotonic_ms()
        if 0 < group.group_epoch == group.assignment_epoch and group.joins_only:
            group.expansion_from_ms = self.clock.monotonic_ms()
        if group.forming_from_ms is None and group.joins_only and not group.owners and not classic:
            group.forming_from_ms = self.clock.monotonic_ms()

    def _maybe_compute_target(self, group: ConsumerGroup, answering: str | None = None) -> None:
        """Compute the target if the group epoch is ahead of it, at most once per
        group.consumer.assignment.interval.ms: within the interval of the last computation, a timer computes it
        when the interval ends (members meanwhile reconcile towards the target they have). `answering`: the
        member whose heartbeat this is, handed the partitions nobody keeps first (`uniform`)."""
        if group.group_epoch <= group.assignment_epoch:
            return
        now = self.clock.monotonic_ms()
        join_window = self._join_window(group, now)
        if join_window is not None:
            # the join window: members starting together are assigned once, so nobody is given partitions only
            # to give them up to the members right behind it (each revocation costs heartbeat intervals)
            pause, closes = join_window
            last_join = group.last_join_ms
            due = min((now if last_join is None else last_join) + pause, closes)
            if now < due:
                self._hold_target(group, due)
                return
        opened = group.expansion_from_ms
        if opened is not None and group.joins_only:
            window = self._own(group.group_id, EXPANSION_TIMEOUT, self.settings.expansion_timeout_ms)
            if window > 0 and now < opened + window:  # the expansion window: joiners are assigned together
                self._hold_target(group, opened + window)
                return
        # O(members) per computation: a small group is assigned at once, a large one at most once per interval
        interval = self.settings.assignment_interval_ms
        if self.settings.members_per_assignment_ms > 0:
            interval = (
                min(interval, len(group.members) // self.settings.members_per_assignment_ms)
                if len(group.members) >= self.settings.batch_from_members
                else 0
            )
        last = group.assigned_at_ms
        if interval <= 0 or last is None or now - last >= interval:
            self._compute_target(group, answering)
            return
        self._hold_target(group, last + interval)

    def _hold_target(self, group: ConsumerGroup, due_ms: int) -> None:
        """Compute the target at `due_ms` (monotonic), by timer unless a heartbeat comes first."""
        key = assignment_key(group.group_id)
        if not self.timer.is_scheduled(key) or group.assignment_due_ms != due_ms:
            group.assignment_due_ms = due_ms
            self.timer.schedule(
                key,
                max(due_ms - self.clock.monotonic_ms(), 0),
                self.calls.op(self._assignment_due, group.group_id),
            )

    def _assignment_due(self, group_id: str) -> None:
        """The assignment interval ended with the group epoch ahead of the target (a call of its own)."""
        group = self.groups.get(group_id)
        if group is None or not group.members or group.group_epoch <= group.assignment_epoch:
            return
        snapshot = None if group.inflight else group.snapshot()
        state_before = group.state
        if not self._compute_target_or_undo(group, snapshot):  # (the interval or a window ended)
            return
        self._wake(group)
        if self.calls.listeners:
            self._emit_if_stable(group, state_before)
        self._track(group_id, snapshot)

    def _compute_target_or_undo(self, group: ConsumerGroup, snapshot: tuple[object, ...] | None) -> bool:
        """Compute the target in a timer's call; if the assignor fails, drop the call's records and go back to
        `snapshot` (the state before the call, None when a write of the group is in flight). False if it failed."""
        try:
            self._compute_target(group)
        except PartitionAssignorError as exc:
            log.warning("group %s: the assignor failed: %s", group.group_id, exc)
            self.calls.fx.records.clear()
            if snapshot is not None:
                group.restore(snapshot)
            return False
        return True

    def _compute_target(self, group: ConsumerGroup, answering: str | None = None) -> None:
        assert self.topics is not None
        group.assigned_at_ms = self.clock.monotonic_ms()
        group.assignment_due_ms = None
        group.expansion_from_ms = None
        if group.forming_from_ms is not None:  # the first target of a new group: joins may still be coming
            group.young_until_ms = group.forming_from_ms + self._join_window_max_ms(group)
        group.forming_from_ms = None
        group.joins_only = True
        self.timer.cancel(assignment_key(group.group_id))
        name = group.preferred_assignor() or self.settings.assignors[0]
        assignor = ASSIGNORS.get(name)
        if assignor is None:
            raise PartitionAssignorError(f"unknown assignor {name}")
        topics: dict[uuid.UUID, int] = {}
        specs: dict[str, MemberSpec] = {}
        # Members mostly share a subscription: each distinct one is resolved to topic ids once.
        resolved: dict[tuple[tuple[str, ...], str | None], frozenset[uuid.UUID]] = {}
        for member in group.members.values():
            subscription = (member.subscribed_topic_names, member.subscribed_topic_regex)
            ids = resolved.get(subscription)
            if ids is None:
                found: set[uuid.UUID] = set()
                for topic in group.subscribed_topic_names(member):
                    if self._withholds(group.group_id, topic):
                        continue  # paused: kept out of the target, so members give it up and nobody takes it
                    topic_id = self.topics.topic_id(topic)
                    count = self.topics.partition_count(topic)
                    if topic_id is None or not count:
                        continue
                    topics[topic_id] = count
                    found.add(topic_id)
                ids = resolved[subscription] = frozenset(found)
            specs[member.member_id] = MemberSpec(
                member.member_id, member.instance_id, ids, group.target.get(member.member_id, {})
            )
        new_target = assignor(specs, topics, answering)
        fx = self.calls.fx
        for member_id in sorted(group.members):
            assignment = new_target.get(member_id, {})
            if assignment != group.target.get(member_id, {}) or member_id not in group.target:
                group.target[member_id] = assignment
                fx.records.append(self._target_member_record(group.group_id, member_id))
        group.assignment_epoch = group.group_epoch
        fx.records.append(self._target_metadata_record(group))
        log.debug(
            "group %s: target assignment at epoch %d by %s for %d members",
            group.group_id,
            group.assignment_epoch,
            name,
            len(group.members),
        )

    # -- events (coordinator.group.events): a group epoch bump is a rebalance, the group Stable its end --------

    def _emit_started(
        self,
        group: ConsumerGroup,
        state_before: ConsumerGroupState,
        reason: RebalanceReason,
        member: MemberInfo | None,
        detail: str,
    ) -> None:
        self.calls.emit(
            RebalanceStarted(
                group.group_id,
                group.group_epoch - 1,
                str(state_before),
                reason,
                member,
                None,
                detail,
                len(group.members),
                self.clock.wall_ms(),
                self.clock.monotonic_ms(),
            )
        )

    def _emit_if_stable(self, group: ConsumerGroup | None, state_before: ConsumerGroupState | None) -> None:
        if (
            group is None
            or state_before == ConsumerGroupState.STABLE
            or group.state != ConsumerGroupState.STABLE
        ):
            return
        now = (self.clock.wall_ms(), self.clock.monotonic_ms())
        self.calls.emit(
            JoinPhaseCompleted(
                group.group_id,
                group.group_epoch,
                str(group.state),
                None,
                group.preferred_assignor() or self.settings.assignors[0],
                tuple(_info(m) for m in group.members.values()),
                *now,
            )
        )
        self.calls.emit(RebalanceCompleted(group.group_id, group.group_epoch, *now))

    # -- records ---------------------------------------------------------------------------------------------

    def _group_metadata_record(self, group: ConsumerGroup) -> CoordinatorRecord:
        return rec.record(
            rec.ConsumerRecordKey(rec.GROUP_METADATA, group.group_id),
            rec.GroupMetadataValue(group.group_epoch, group.metadata_hash),
        )

    @staticmethod
    def _target_metadata_record(group: ConsumerGroup) -> CoordinatorRecord:
        return rec.record(
            rec.ConsumerRecordKey(rec.TARGET_ASSIGNMENT_METADATA, group.group_id),
            rec.TargetAssignmentMetadataValue(group.assignment_epoch),
        )

    @staticmethod
    def _member_metadata_record(group_id: str, member: ConsumerMember) -> CoordinatorRecord:
        return rec.record(
            rec.ConsumerRecordKey(rec.MEMBER_METADATA, group_id, member.member_id),
            rec.MemberMetadataValue(
                member.instance_id,
                member.rack_id,
                member.client_id,
                member.client_host,
                member.subscribed_topic_names,
                member.subscribed_topic_regex,
                member.rebalance_timeout_ms,
                member.server_assignor,
                member.classic,
            ),
        )

    def _target_member_record(self, group_id: str, member_id: str) -> CoordinatorRecord:
        group = self.groups[group_id]
        return rec.record(
            rec.ConsumerRecordKey(rec.TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
            rec.TargetAssignmentMemberValue(group.target.get(member_id, {})),
        )

    @staticmethod
    def _current_assignment_record(group_id: str, member: ConsumerMember) -> CoordinatorRecord:
        return rec.record(
            rec.ConsumerRecordKey(rec.CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id),
            rec.CurrentMemberAssignmentValue(
                member.member_epoch,
                member.previous_member_epoch,
                int(member.state),
                member.assigned,
                member.pending_revocation,
            ),
        )

    def pause_changed(self, group_id: str, why: str) -> None:
        """The group's pause changed: a new group epoch, so the next heartbeat computes a target without the
        paused partitions (or with the resumed ones)."""
        group = self.groups.get(group_id)
        if group is None or group.is_empty():
            return
        state_before = group.state
        snapshot = None if group.inflight else group.snapshot()
        self._note_bump(group, joined=False)
        group.group_epoch += 1
        self.calls.fx.records.append(self._group_metadata_record(group))
        log.info("group %s: %s; group epoch %d", group_id, why, group.group_epoch)
        if self.calls.listeners:
            self._emit_started(group, state_before, RebalanceReason.PAUSE, None, why)
        self._track(group_id, snapshot)

    def pause_pending(self, group: ConsumerGroup) -> list[str]:
        """The members the group's pause state is not yet in effect for: those still holding (assigned or
        revoking) a partition the pause withholds; when none does but the group has not settled on its target
        (a resume hands partitions out again), the members not yet reconciled to it, or all while the target
        is still to be computed."""
        holders = []
        if self.topics is not None:
            for member in group.members.values():
                for topic_id, _partition in member.partitions():
                    name = self.topics.topic_name(topic_id)
                    if name is not None and self._withholds(group.group_id, name):
                        holders.append(member.member_id)
                        break
        if holders or group.state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY):
            return sorted(holders)
        if group.group_epoch != group.assignment_epoch:
            return sorted(group.members)
        return sorted(
            m.member_id
            for m in group.members.values()
            if m.member_epoch != group.assignment_epoch or m.state != MemberState.STABLE
        )

    def group_tombstones(self, group: ConsumerGroup) -> list[CoordinatorRecord]:
        """The records deleting a group (Kafka's createGroupTombstoneRecords): current assignments, targets,
        the target metadata, members, then the group. Its offsets are not among them."""
        group_id = group.group_id
        result = [
            rec.record(rec.ConsumerRecordKey(rec.CURRENT_MEMBER_ASSIGNMENT, group_id, m), None)
            for m in sorted(group.members)
        ]
        result += [
            rec.record(rec.ConsumerRecordKey(rec.TARGET_ASSIGNMENT_MEMBER, group_id, m), None)
            for m in sorted(group.target)
        ]
        result.append(rec.record(rec.ConsumerRecordKey(rec.TARGET_ASSIGNMENT_METADATA, group_id), None))
        result += [
            rec.record(rec.ConsumerRecordKey(rec.MEMBER_METADATA, group_id, m), None)
            for m in sorted(group.members)
        ]
        result.append(rec.record(rec.ConsumerRecordKey(rec.GROUP_METADATA, group_id), None))
        return result

    def remove_group(self, group_id: str) -> list[CoordinatorRecord]:
        """Delete a group from memory now; its tombstones (empty if there is no such group)."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return []
        self._cancel_timers(group)
        if self.calls.listeners:
            self.calls.emit(GroupRemoved(group_id, self.clock.wall_ms()))
        return self.group_tombstones(group)

    def drop_group(self, group_id: str) -> None:
        """Forget a group whose making could not be written (an upgrade): no tombstones, no event."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            self._cancel_timers(group)

    def restore_group(self, group: ConsumerGroup) -> None:
        self.groups.setdefault(group.group_id, group)

    # ========================================================================================================
    # Members of the classic protocol inside a consumer group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup
    # ========================================================================================================
    #
    # Kafka's classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup. A classic member goes through the same
    # epochs, target and reconciliation as the others: its JoinGroup is its heartbeat with a subscription (and
    # the partitions it owns, from the subscription); every classic member is a follower (no leader: the
    # coordinator assigns), its generation is its member epoch, and its SyncGroup answer is its assigned
    # partitions. Its Heartbeat answers REBALANCE_IN_PROGRESS while it must rejoin to move on (the group epoch
    # moved past its epoch, it owes revocations, or partitions it waits for were released), and then it must
    # rejoin within its rebalance timeout (join timer); after a JoinGroup it must sync within it (sync timer).

    @state_machine_call
    def classic_join(
        self,
        token: object,
        api_version: int,
        request: Any,
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str = "",
        client_host: str = "",
    ) -> None:
        """JoinGroup v0-v9 to a consumer group with members (the shard validated group id and timeouts)."""
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = lambda error: join_response(api_version, error=error, member_id=request.member_id)
        group = self.groups[request.group_id]
        snapshot = None if group.inflight else group.snapshot()
        state_before = group.state
        try:
            answer = self._classic_join(
                group, api_version, request, session_timeout_ms, rebalance_timeout_ms, client_id, client_host
            )
        except (HeartbeatError, PartitionAssignorError) as exc:
            code = exc.code if isinstance(exc, HeartbeatError) else ErrorCode.unknown_server_error
            for hook in fx.failure_hooks:
                hook(code)
            fx.failure_hooks.clear()
            fx.records.clear()
            if snapshot is not None and isinstance(exc, PartitionAssignorError):
                group.restore(snapshot)
            answer = join_response(api_version, error=code, member_id=request.member_id)
        if self.calls.listeners and self.groups.get(group.group_id) is group:  # (not downgraded)
            self._emit_if_stable(group, state_before)
        self._track(group.group_id, snapshot)
        self.calls.respond(token, answer)

    def _classic_join(
        self,
        group: ConsumerGroup,
        api_version: int,
        request: Any,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
    ) -> Any:
        group_id = group.group_id
        instance_id = getattr(request, "group_instance_id", None)
        protocols = tuple((p.name, bytes(p.metadata)) for p in request.protocols)
        unknown = not request.member_id
        member_id = request.member_id or self._new_uuid()
        if member_id not in group.members and len(group.members) >= self.settings.max_size:
            raise HeartbeatError(ErrorCode.group_max_size_reached)
        if (
            request.protocol_type != CONSUMER_PROTOCOL_TYPE
            or not protocols
            or not self._supported_by_all(group, member_id, [name for name, _ in protocols])
        ):
            raise HeartbeatError(ErrorCode.inconsistent_group_protocol)
        if unknown and instance_id is None and api_version >= 4:
            # KIP-394: a dynamic member gets its id first and joins again with it.
            return join_response(api_version, error=ErrorCode.member_id_required, member_id=member_id)
        try:
            subscription = parse_subscription(protocols[0][1])
        except ValueError:
            raise HeartbeatError(ErrorCode.inconsistent_group_protocol) from None

        replaced: ConsumerMember | None = None
        if instance_id is None:
            member = group.members.get(member_id) or ConsumerMember(member_id)
        else:
            old = group.static_member(instance_id)
            if unknown:
                if old is None:
                    member = ConsumerMember(member_id, instance_id=instance_id)
                else:
                    # The static member restarted: the new instance takes its place and its partitions. (Kafka
                    # asks the one replaced to have left only when both use the consumer protocol.)
                    replaced = old
                    member = dataclasses.replace(
                        old, member_id=member_id, state=MemberState.STABLE, pending_revocation={}
                    )
            elif old is None:
                raise HeartbeatError(ErrorCode.unknown_member_id)
            elif old.member_id != member_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id)
            else:
                member = old
        if member_id in group.members and not member.uses_classic_protocol:
            raise HeartbeatError(ErrorCode.unknown_member_id)  # a consumer-protocol member's id
        new_member = member_id not in group.members and replaced is None

        updated = dataclasses.replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,  # (KAFKA-19720: a classic member replacing a consumer one)
            classic=ClassicMemberMetadata(session_timeout_ms, protocols),
        )
        bump = (
            group.group_epoch == 0
            or new_member
            or updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        )
        self._apply_member(group, member, updated, replaced, bump, new_member)

        def joined(generation: int) -> Any:  # (every classic member of a consumer group is a follower)
            return join_response(
                api_version,
                member_id=member_id,
                generation_id=generation,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=protocols[0][0],
                leader="",
            )

        if (
            replaced is not None
            and not replaced.uses_classic_protocol
            and self._maybe_downgrade(
                group, (replaced,), replaced_by=group.members[member_id], rebalance=bump
            )
        ):
            # The last consumer-protocol member was replaced: the group is a classic group now, with this member in
            # it holding the partitions of the one it replaced (a rebalance begun if its subscription changed).
            return joined(group.group_epoch)
        member = group.members[member_id]
        owned = self._ids(subscription.owned)
        try:
            next_member = reconcile(
                member, group.assignment_epoch, group.target.get(member_id, {}), owned, group.owner
            )
        except MemberFenced:
            # (a classic member has no epoch to be fenced by: it starts again from its target)
            next_member = reconcile(
                dataclasses.replace(member, state=MemberState.STABLE, member_epoch=0),
                group.assignment_epoch,
                group.target.get(member_id, {}),
                owned,
                group.owner,
            )
        self._reconciled(group, member, next_member)
        self.timer.cancel(join_key(group_id, member_id))
        self.timer.schedule(
            sync_key(group_id, member_id),
            rebalance_timeout_ms,
            self.calls.op(
                self._classic_timer_expired, group_id, member_id, "did not send its SyncGroup in time"
            ),
        )
        return joined(next_member.member_epoch)

    def _supported_by_all(self, group: ConsumerGroup, member_id: str, names: list[str]) -> bool:
        """Whether one of `names` is a protocol every other classic member supports."""
        wanted = set(names)
        for other in group.members.values():
            if other.classic is not None and other.member_id != member_id:
                wanted &= {name for name, _ in other.classic.protocols}
                if not wanted:
                    return False
        return True

    def _classic_timer_expired(self, group_id: str, member_id: str, why: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            self._expire(
                group, member_id, why, RemovalCause.REBALANCE_TIMEOUT, RebalanceReason.REBALANCE_TIMEOUT
            )

    def _classic_member(self, group: ConsumerGroup, request: Any) -> ConsumerMember:
        """The classic member a SyncGroup or Heartbeat is from (Kafka's validateConsumerGroupMember,
        throwIfMemberDoesNotUseClassicProtocol and throwIfGenerationIdUnmatched)."""
        member_id = request.member_id
        instance_id = getattr(request, "group_instance_id", None)
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id)
            if member.member_id != member_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id)
        if not member.uses_classic_protocol:
            raise HeartbeatError(ErrorCode.unknown_member_id)
        if int(request.generation_id) != member.member_epoch:
            raise HeartbeatError(ErrorCode.illegal_generation)
        return member

    @state_machine_call
    def classic_sync(self, token: object, api_version: int, request: Any) -> None:
        """SyncGroup v0-v5 to a consumer group: the member's assigned partitions."""
        group = self.groups[request.group_id]
        try:
            member = self._classic_member(group, request)
            assert member.classic is not None
            protocol_type = getattr(request, "protocol_type", None)
            protocol_name = getattr(request, "protocol_name", None)
            names = [name for name, _ in member.classic.protocols]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name not in names
            ):
                raise HeartbeatError(ErrorCode.inconsistent_group_protocol)
            if self._behind(group, member) and member.state != MemberState.UNREVOKED_PARTITIONS:
                raise HeartbeatError(ErrorCode.rebalance_in_progress)
        except HeartbeatError as exc:
            self.calls.respond(token, sync_response(error=exc.code))
            return
        group_id = group.group_id
        self.timer.cancel(sync_key(group_id, member.member_id))
        self._schedule_session_timeout(group_id, member.member_id)
        version = subscription_version(protocol_metadata(member.classic.protocols, protocol_name) or b"")
        self.calls.respond(
            token,
            sync_response(
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=protocol_name if protocol_name is not None else names[0],
                assignment=assignment_bytes(version, self._names(member.assigned)),
            ),
        )

    @state_machine_call
    def classic_heartbeat(self, token: object, api_version: int, request: Any) -> None:
        """Heartbeat v0-v4 to a consumer group."""
        group = self.groups[request.group_id]
        try:
            member = self._classic_member(group, request)
        except HeartbeatError as exc:
            self.calls.respond(token, classic_heartbeat_response(exc.code))
            return
        group_id = group.group_id
        self._schedule_session_timeout(group_id, member.member_id)
        error = ErrorCode.none
        if (
            self._behind(group, member)
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (
                member.state == MemberState.UNRELEASED_PARTITIONS
                and not self._waits_on_unreleased(group, member)
            )
        ):
            error = ErrorCode.rebalance_in_progress
            key = join_key(group_id, member.member_id)
            if not self.timer.is_scheduled(key):
                self.timer.schedule(
                    key,
                    member.rebalance_timeout_ms if member.rebalance_timeout_ms >= 0 else 300_000,
                    self.calls.op(
                        self._classic_timer_expired, group_id, member.member_id, "did not rejoin in time"
                    ),
                )
        self.calls.respond(token, classic_heartbeat_response(error))

    def _behind(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether a JoinGroup would move the classic member on (Kafka: its epoch is below the group epoch): a
        target it has not reached, or a group epoch ahead of the target whose computation is not held back by
        group.consumer.assignment.interval.ms (a rejoin computes it; a held-back one, its timer)."""
        return member.member_epoch < group.assignment_epoch or (
            group.group_epoch > group.assignment_epoch
            and not self.timer.is_scheduled(assignment_key(group.group_id))
        )

    @staticmethod
    def _waits_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target it does not have yet is still held by another member."""
        for topic_id, partitions in group.target.get(member.member_id, {}).items():
            for p in partitions - member.assigned.get(topic_id, frozenset()):
                holder = group.owner(topic_id, p)
                if holder is not None and holder != member.member_id:
                    return True
        return False

    @state_machine_call
    def classic_leave(self, token: object, api_version: int, request: Any) -> None:
        """LeaveGroup v0-v5 to a consumer group: every member named (of either protocol) is removed."""
        fx = self.calls.fx
        fx.own_token = token
        fx.own_error = lambda error: leave_response(api_version, error=error)
        group = self.groups[request.group_id]
        snapshot = None if group.inflight else group.snapshot()
        if hasattr(request, "members") and (api_version >= 3 or not hasattr(request, "member_id")):
            identities = [(m.member_id, getattr(m, "group_instance_id", None)) for m in request.members]
        else:
            identities = [(request.member_id, None)]
        answers = []
        leaving: dict[str, ConsumerMember] = {}
        for member_id, instance_id in identities:
            error = ErrorCode.none
            if instance_id is None:
                member = group.members.get(member_id)
                if member is None:
                    error = ErrorCode.unknown_member_id
            else:
                member = group.static_member(instance_id)
                if member is None:
                    error = ErrorCode.unknown_member_id
                elif member_id and member.member_id != member_id:
                    error = ErrorCode.fenced_instance_id
            if error == ErrorCode.none and member is not None:
                leaving[member.member_id] = member
            answers.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
        if leaving and not self._maybe_downgrade(group, leaving.values()):
            for member_id in leaving:
                self._remove_member(
                    group, member_id, "left the group", RemovalCause.LEFT, RebalanceReason.LEAVE
                )
        self._track(group.group_id, snapshot)
        self.calls.respond(token, leave_response(api_version, members=answers))

    # ========================================================================================================
    # ConsumerGroupDescribe
    # ========================================================================================================

    def describe(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        """ConsumerGroupDescribe v0-v1's groups."""
        described = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                described.append(described_group_error(group_id, ErrorCode.invalid_group_id))
            elif group is None:
                described.append(
                    described_group_error(
                        group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found."
                    )
                )
            else:
                described.append(self._describe(group))
        return described

    def _describe(self, group: ConsumerGroup) -> dict[str, Any]:
        members = []
        for member in sorted(group.members.values(), key=lambda m: m.member_id):
            # Partitions being revoked are still the member's (Kafka 4.4, KAFKA-20431).
            current: dict[uuid.UUID, frozenset[int]] = dict(member.assigned)
            for t, ps in member.pending_revocation.items():
                current[t] = current.get(t, frozenset()) | ps
            members.append(
                {
                    "member_id": member.member_id,
                    "instance_id": member.instance_id,
                    "rack_id": member.rack_id,
                    "member_epoch": member.member_epoch,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "subscribed_topic_names": list(member.subscribed_topic_names),
                    "subscribed_topic_regex": member.subscribed_topic_regex,
                    "assignment": self._named(current),
                    "target_assignment": self._named(group.target.get(member.member_id, {})),
                    "member_type": MEMBER_TYPE_CLASSIC
                    if member.uses_classic_protocol
                    else MEMBER_TYPE_CONSUMER,
                }
            )
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_id": group.group_id,
            "group_state": str(group.state),
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.preferred_assignor() or self.settings.assignors[0],
            "members": members,
            "authorized_operations": NO_AUTHORIZED_OPERATIONS,
        }

    def _named(self, assignment: Assignment) -> dict[str, Any]:
        partitions = []
        for t, ps in sorted(assignment.items()):
            if not ps:
                continue
            name = self.topics.topic_name(t) if self.topics is not None else None
            partitions.append({"topic_id": t, "topic_name": name or "", "partitions": sorted(ps)})
        return {"topic_partitions": partitions}

    # ========================================================================================================
    # Offsets: who may commit and fetch
    # ========================================================================================================

    def validate_offset_commit(
        self,
        group: ConsumerGroup,
        member_id: str,
        epoch: int,
        api_version: int,
        transactional: bool = False,
        partitions: Iterable[tuple[str, int]] = (),
    ) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit, with 4.3's rule for an epoch behind the member's
        (KIP-1251): a commit of `partitions` (topic name, partition) at an older epoch is accepted when the
        member was given every one of them at that epoch or before (a commit sent before the client took in
        a heartbeat answer that moved its epoch; Kafka 4.1 answers it STALE_MEMBER_EPOCH). A member of the
        classic protocol commits with its generation, which it may need no v9 for, and the same rule holds
        for it: its JoinGroup is answered at once with a new generation, so a commit it sent right behind
        that JoinGroup comes with the generation before (Kafka answers it ILLEGAL_GENERATION)."""
        if epoch < 0 and group.is_empty():
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        classic = member.uses_classic_protocol
        if not classic and not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if epoch != member.member_epoch and not (
            0 <= epoch < member.member_epoch and self._held_at(member, epoch, partitions)
        ):
            return ErrorCode.illegal_generation if classic or transactional else ErrorCode.stale_member_epoch
        return ErrorCode.none

    def _held_at(self, member: ConsumerMember, epoch: int, partitions: Iterable[tuple[str, int]]) -> bool:
        if self.topics is None:
            return False
        found = False
        for topic, partition in partitions:
            topic_id = self.topics.topic_id(topic)
            since = None if topic_id is None else held_since(member, topic_id, partition)
            if since is None or since > epoch:
                return False
            found = True
        return found

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch."""
        if member_id is None and epoch < 0:
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if epoch != member.member_epoch:
            return (
                ErrorCode.illegal_generation if member.uses_classic_protocol else ErrorCode.stale_member_epoch
            )
        return ErrorCode.none

    # ========================================================================================================
    # Loading
    # ========================================================================================================

    def replay(self, key: rec.ConsumerRecordKey, value: Any) -> None:
        """Apply a record of the log being loaded."""
        group_id = key.group
        if key.type in (rec.PARTITION_METADATA, rec.REGULAR_EXPRESSION):
            return
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[group_id] = ConsumerGroup(group_id)
        if key.type == rec.GROUP_METADATA:
            if value is None:
                del self.groups[group_id]
            else:
                group.group_epoch = value.epoch
                group.metadata_hash = value.metadata_hash
        elif key.type == rec.TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = 0 if value is None else value.assignment_epoch
        elif key.type == rec.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                group.target.pop(key.member_id, None)
            else:
                group.target[key.member_id] = dict(value.partitions)
        elif key.type == rec.MEMBER_METADATA:
            if value is None:
                group.members.pop(key.member_id, None)
            else:
                old = group.members.get(key.member_id) or ConsumerMember(key.member_id)
                group.members[key.member_id] = dataclasses.replace(
                    old,
                    instance_id=value.instance_id,
                    rack_id=value.rack_id,
                    client_id=value.client_id,
                    client_host=value.client_host,
                    subscribed_topic_names=tuple(value.subscribed_topic_names),
                    subscribed_topic_regex=value.subscribed_topic_regex,
                    rebalance_timeout_ms=value.rebalance_timeout_ms,
                    server_assignor=value.server_assignor,
                    classic=value.classic,
                )
        elif key.type == rec.CURRENT_MEMBER_ASSIGNMENT:
            holder = group.members.get(key.member_id)
            if value is None:
                if holder is not None:
                    group.members[key.member_id] = dataclasses.replace(
                        holder,
                        member_epoch=0,
                        previous_member_epoch=0,
                        state=MemberState.STABLE,
                        assigned={},
                        pending_revocation={},
                    )
            else:
                try:
                    state = MemberState(value.state)
                except ValueError:
                    state = MemberState.UNKNOWN
                group.members[key.member_id] = dataclasses.replace(
                    holder or ConsumerMember(key.member_id),
                    member_epoch=value.member_epoch,
                    previous_member_epoch=value.previous_member_epoch,
                    state=state,
                    assigned=dict(value.assigned),
                    pending_revocation=dict(value.pending_revocation),
                )

    def on_loaded(self) -> None:
        """The log is loaded: owners and static members are rebuilt, session timers start for every member, and
        rebalance timers for members that owe revocations. Static members written offline are offline again, with
        the time their registration window has left, and no session timer."""
        now_mono, now_wall = self.clock.monotonic_ms(), self.clock.wall_ms()
        for group in self.groups.values():
            group.rebuild_owners()
            for member_id, since_wall_ms in self.loaded_offline.get(group.group_id, {}).items():
                member = group.members.get(member_id)
                if member is not None and member.instance_id is not None:
                    group.offline[member_id] = now_mono - max(0, now_wall - since_wall_ms)
            for member in group.members.values():
                if member.member_id in group.offline:
                    continue  # (its timers were cancelled when it went offline)
                self._schedule_session_timeout(group.group_id, member.member_id)
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group, member)
            if group.offline:
                self._schedule_registration_end(group)
        self.loaded_offline.clear()

    def replay_group_offline(self, group_id: str, value: GroupOfflineValue | None) -> None:
        """A GroupOffline record of the log being loaded: applied to the loaded members in on_loaded."""
        if value is None:
            self.loaded_offline.pop(group_id, None)
        else:
            self.loaded_offline[group_id] = dict(value.members)

    def on_unloaded(self) -> None:
        for group in self.groups.values():
            self._cancel_timers(group)
        self._held.clear()  # (the runtime answers every request left waiting)

    # -- for observers ---------------------------------------------------------------------------------------

    def list_entries(self, states_filter: Iterable[str], types_filter: Iterable[str]) -> list[dict[str, Any]]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and "consumer" not in types:
            return []
        listed = []
        for group in self.groups.values():
            state = str(group.state)
            if states and state.lower() not in states:
                continue
            listed.append(
                {
                    "group_id": group.group_id,
                    "protocol_type": "consumer",
                    "group_state": state,
                    "group_type": "consumer",
                }
            )
        return listed

    def is_subscribed_to_topic(self, group_id: str, topic: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and topic in group.subscribed_topic_names()


def _same(owned: Mapping[uuid.UUID, frozenset[int]], assigned: Assignment) -> bool:
    """Whether a heartbeat's owned partitions are exactly the assignment (empty topics aside)."""
    return {t: ps for t, ps in owned.items() if ps} == {t: ps for t, ps in assigned.items() if ps}


def _info(member: ConsumerMember) -> MemberInfo:
    return MemberInfo(member.member_id, member.instance_id, member.client_id, member.client_host)


def _with_heartbeat(
    member: ConsumerMember, request: Any, regex: str | None, client_id: str, client_host: str
) -> ConsumerMember:
    """The member as its heartbeat leaves it (a field the request leaves null keeps its value; an empty regex
    clears it); `member` itself when the heartbeat changes nothing, as a steady heartbeat does not."""
    rebalance_timeout_ms = ms(request.rebalance_timeout)
    names = request.subscribed_topic_names
    values: dict[str, Any] = {
        "instance_id": request.instance_id if request.instance_id is not None else member.instance_id,
        "rack_id": request.rack_id if request.rack_id is not None else member.rack_id,
        "client_id": client_id,
        "client_host": client_host,
        "rebalance_timeout_ms": rebalance_timeout_ms
        if rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        "server_assignor": request.server_assignor
        if request.server_assignor is not None
        else member.server_assignor,
        "subscribed_topic_names": tuple(sorted(names))
        if names is not None
        else member.subscribed_topic_names,
        "subscribed_topic_regex": (regex or None) if regex is not None else member.subscribed_topic_regex,
        "classic": None,
    }
    for name, value in values.items():
        if getattr(member, name) != value:
            return dataclasses.replace(member, **values)
    return member


def _metadata_changed(old: ConsumerMember, new: ConsumerMember) -> bool:
    return (
        old.instance_id != new.instance_id
        or old.rack_id != new.rack_id
        or old.client_id != new.client_id
        or old.client_host != new.client_host
        or old.subscribed_topic_names != new.subscribed_topic_names
        or old.subscribed_topic_regex != new.subscribed_topic_regex
        or old.rebalance_timeout_ms != new.rebalance_timeout_ms
        or old.server_assignor != new.server_assignor
        or old.classic != new.classic
    )


def consumer_group_state_names() -> list[str]:
    return [str(s) for s in ConsumerGroupState]


__all__ = [
    "ConsumerGroupManager",
    "ConsumerGroupSettings",
    "TopicImage",
    "Mapping",
]
