"""A test context for the group coordinator, in the manner of Kafka's GroupMetadataManagerTestContext.

It plays the runtime: every result's records are appended to an in-memory log and replayed, and every response
is filed under its token — a token answered twice fails the test at once. Time moves only through
`ctx.advance(ms)` (a ManualClock and a ManualTimer), which returns the results of the timer operations that
fired.

Requests are kio entities of the exact version a test names, so the handlers see what the dispatcher would
give them. Defaults follow Kafka's test context: session and rebalance timeouts of 500 ms, a minimum session
timeout of 10 ms, a 3 s initial rebalance delay, protocol type "consumer" and protocols whose metadata is a
real consumer Subscription of one topic.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from kio.index import load_request_schema
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember
from kio.serial import entity_writer
from kio.static.primitive import i32, i32Timedelta

from coordinator.clock import ManualClock, ManualTimer, join_key, session_timeout_key, sync_key
from coordinator.group import ClassicGroup
from coordinator.records import CoordinatorRecord, decode_record, group_metadata_value
from coordinator.result import CoordinatorResult
from coordinator.shard import GroupCoordinatorShard
from protocol.build import build
from protocol.errors import ErrorCode

JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42

LATEST = {
    JOIN_GROUP: 9,
    SYNC_GROUP: 5,
    HEARTBEAT: 4,
    LEAVE_GROUP: 5,
    OFFSET_COMMIT: 9,
    OFFSET_FETCH: 9,
    OFFSET_DELETE: 0,
    DESCRIBE_GROUPS: 6,
    LIST_GROUPS: 5,
    DELETE_GROUPS: 2,
}

DEFAULT_TOPICS = ("foo", "bar", "baz")
CLIENT_ID = "client"
CLIENT_HOST = "/127.0.0.1"


def subscription(*topics: str) -> bytes:
    """A consumer-protocol Subscription (version 0) of `topics`."""
    buf = io.BytesIO()
    buf.write((0).to_bytes(2, "big"))
    entity_writer(SubscriptionV0)(buf, SubscriptionV0(topics=tuple(topics), user_data=None))
    return buf.getvalue()


def to_protocols(*names: str) -> tuple[tuple[str, bytes], ...]:
    """Kafka's toProtocols: the i-th protocol subscribes to foo, bar, baz in turn."""
    return tuple((name, subscription(DEFAULT_TOPICS[i % 3])) for i, name in enumerate(names))


def request(api_key: int, version: int, **fields: Any) -> Any:
    return build(load_request_schema(api_key, version), fields)


def join_answer(
    version: int,
    *,
    error: ErrorCode = ErrorCode.none,
    member_id: str = "",
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    members: Iterable[Any] = (),
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    """The JoinGroup answer a test expects, spelled out field by field (the handler builds its own). Kafka's
    JoinGroupResponse: ProtocolName is "" before v7 and null from v7 when no protocol is chosen; the answer is
    built as the newest version, the codec drops what older versions lack."""
    if protocol_name is None and version < 7:
        protocol_name = ""
    return JoinGroupResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=error,
        generation_id=i32(generation_id),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader,
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=tuple(
            m
            if isinstance(m, JoinGroupResponseMember)
            else JoinGroupResponseMember(
                member_id=m["member_id"], group_instance_id=m["group_instance_id"], metadata=m["metadata"]
            )
            for m in members
        ),
    )


@dataclasses.dataclass(eq=False)
class Token:
    name: str

    def __repr__(self) -> str:
        return f"<{self.name}>"


@dataclasses.dataclass(eq=False)
class Call:
    """One request sent to the manager: its token, the result of the call, and the answer once it exists."""

    ctx: GroupTestContext
    token: Token
    result: CoordinatorResult

    @property
    def records(self) -> list[CoordinatorRecord]:
        return self.result.records

    @property
    def done(self) -> bool:
        return self.token in self.ctx.answers

    @property
    def response(self) -> Any:
        assert self.done, f"{self.token} has no answer yet"
        return self.ctx.answers[self.token]

    @property
    def error(self) -> ErrorCode:
        return ErrorCode(self.response.error_code)


class GroupTestContext:
    def __init__(self, *, loaded: bool = True, apply_records: bool = True, **settings: Any) -> None:
        settings.setdefault("group_min_session_timeout_ms", 10)
        settings.setdefault("group_max_session_timeout_ms", 10 * 60 * 1000)
        self.settings = settings
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self._uuids = itertools.count()
        self.shard = GroupCoordinatorShard(self.clock, self.timer, new_uuid=self._next_uuid, **settings)
        self.log: list[CoordinatorRecord] = []
        self.answers: dict[Token, Any] = {}
        self._tokens = itertools.count()
        self.apply_records = apply_records
        if loaded:
            self.apply(self.shard.on_loaded())

    def _next_uuid(self) -> str:
        return f"uuid{next(self._uuids)}"

    def restart(self, *, down_ms: int = 0, listener: Any = None, **settings: Any) -> GroupTestContext:
        """A new coordinator that loads the log this one wrote, with this one's settings (`settings` override
        them); its log starts as this one's. Its monotonic clock reads this one's and its wall clock `down_ms`
        later (the time it was down); `listener`, a group event listener, sees the load too."""
        fresh = GroupTestContext(loaded=False, **{**self.settings, **settings})
        fresh.clock.advance(self.clock.monotonic_ms())
        fresh.clock.set_wall_ms(self.clock.wall_ms() + down_ms)
        for record in self.log:
            fresh.shard.replay(record)
            fresh.log.append(record)
        if listener is not None:
            fresh.shard.add_listener(listener)
        fresh.apply(fresh.shard.on_loaded())
        return fresh

    # -- the runtime -----------------------------------------------------------------------------------------

    def apply(self, result: CoordinatorResult) -> CoordinatorResult:
        """Append the records to the log and replay them, then file the answers (the success path)."""
        if self.apply_records:
            for record in result.records:
                self.log.append(record)
                self.shard.replay(record)
        self.file_answers(result.responses)
        return result

    def fail(
        self, result: CoordinatorResult, error: ErrorCode = ErrorCode.coordinator_not_available
    ) -> CoordinatorResult:
        """The append of `result` failed: deliver what its failure handler says instead."""
        assert result.on_append_failure is not None, "this result has no failure handler"
        return self.apply(result.on_append_failure(error))

    def file_answers(self, responses: Iterable[tuple[object, Any]]) -> None:
        for token, response in responses:
            assert isinstance(token, Token), token
            assert token not in self.answers, f"{token} answered twice: {self.answers[token]} and {response}"
            self.answers[token] = response

    def token(self, name: str) -> Token:
        return Token(f"{name}-{next(self._tokens)}")

    def send(
        self, method: str, api_key: int, version: int | None, name: str, apply: bool = True, **fields: Any
    ) -> Call:
        version = LATEST[api_key] if version is None else version
        token = self.token(name)
        result = getattr(self.shard, method)(token, version, request(api_key, version, **fields))
        if apply:
            self.apply(result)
        return Call(self, token, result)

    def advance(self, ms: int) -> list[CoordinatorResult]:
        results = self.timer.advance(ms)
        for result in results:
            self.apply(result)
        return results

    # -- requests --------------------------------------------------------------------------------------------

    def join_group(
        self,
        group_id: str = "group-id",
        member_id: str = "",
        *,
        group_instance_id: str | None = None,
        protocol_type: str = "consumer",
        protocols: Sequence[tuple[str, bytes]] | None = None,
        session_timeout_ms: int = 500,
        rebalance_timeout_ms: int = 500,
        reason: str | None = None,
        version: int = 3,
        client_id: str = CLIENT_ID,
        apply: bool = True,
    ) -> Call:
        """JoinGroup; v3 by default as in Kafka's context (no MEMBER_ID_REQUIRED); version=4+ for KIP-394."""
        protocols = to_protocols("range") if protocols is None else protocols
        token = self.token(f"join-{group_instance_id or member_id or 'new'}")
        # Like Kafka's test context, a static member may join with the semantics of an older version (v3: no
        # MEMBER_ID_REQUIRED); the entity is then of the first version that carries the instance id.
        entity_version = version if group_instance_id is None else max(version, 5)
        entity = request(
            JOIN_GROUP,
            entity_version,
            group_id=group_id,
            session_timeout=session_timeout_ms,
            rebalance_timeout=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocols=[{"name": n, "metadata": m} for n, m in protocols],
            reason=reason,
        )
        result = self.shard.join_group(token, version, entity, client_id=client_id, client_host=CLIENT_HOST)
        if apply:
            self.apply(result)
        return Call(self, token, result)

    def sync_group(
        self,
        group_id: str = "group-id",
        member_id: str = "",
        generation_id: int = 0,
        *,
        group_instance_id: str | None = None,
        assignments: dict[str, bytes] | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int = 5,
        apply: bool = True,
    ) -> Call:
        return self.send(
            "sync_group",
            SYNC_GROUP,
            version,
            f"sync-{group_instance_id or member_id}",
            apply=apply,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        )

    def heartbeat(
        self,
        group_id: str = "group-id",
        member_id: str = "",
        generation_id: int = 0,
        *,
        group_instance_id: str | None = None,
        version: int = 4,
    ) -> Call:
        return self.send(
            "heartbeat",
            HEARTBEAT,
            version,
            f"heartbeat-{member_id}",
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
        )

    def leave_group(
        self,
        group_id: str = "group-id",
        members: Sequence[tuple[str, str | None]] = (),
        *,
        version: int = 5,
        apply: bool = True,
    ) -> Call:
        """LeaveGroup with (member id, group instance id) identities; v0-v2 take the first member id."""
        if version < 3:
            return self.send(
                "leave_group",
                LEAVE_GROUP,
                version,
                "leave",
                apply=apply,
                group_id=group_id,
                member_id=members[0][0],
            )
        return self.send(
            "leave_group",
            LEAVE_GROUP,
            version,
            "leave",
            apply=apply,
            group_id=group_id,
            members=[{"member_id": m, "group_instance_id": i} for m, i in members],
        )

    def commit(
        self,
        group_id: str = "group-id",
        offsets: dict[tuple[str, int], int] | None = None,
        *,
        member_id: str = "",
        generation_id: int = -1,
        group_instance_id: str | None = None,
        metadata: str | None = None,
        leader_epoch: int = -1,
        retention_time_ms: int = -1,
        version: int = 9,
        apply: bool = True,
    ) -> Call:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in (offsets or {("foo", 0): 100}).items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": leader_epoch,
                    "committed_metadata": metadata,
                }
            )
        return self.send(
            "offset_commit",
            OFFSET_COMMIT,
            version,
            "commit",
            apply=apply,
            group_id=group_id,
            generation_id_or_member_epoch=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            retention_time=retention_time_ms,
            topics=[{"name": t, "partitions": p} for t, p in by_topic.items()],
        )

    def fetch(
        self,
        group_id: str = "group-id",
        topics: dict[str, list[int]] | None = None,
        *,
        require_stable: bool = False,
        version: int = 9,
    ) -> Call:
        wire_topics = (
            None if topics is None else [{"name": t, "partition_indexes": p} for t, p in topics.items()]
        )
        if version >= 8:
            return self.send(
                "offset_fetch",
                OFFSET_FETCH,
                version,
                "fetch",
                require_stable=require_stable,
                groups=[{"group_id": group_id, "topics": wire_topics}],
            )
        return self.send(
            "offset_fetch",
            OFFSET_FETCH,
            version,
            "fetch",
            require_stable=require_stable,
            group_id=group_id,
            topics=wire_topics,
        )

    # -- composite flows (Kafka's joinClassicGroupAsDynamicMemberAndCompleteJoin etc.) -----------------------

    def join_as_dynamic_member_and_complete_join(self, group_id: str = "group-id", **kwargs: Any) -> Any:
        """KIP-394 two-step join of one member, then the initial delay; returns the JoinGroup answer."""
        version = kwargs.pop("version", 5)
        first = self.join_group(group_id, version=version, **kwargs)
        assert first.error == ErrorCode.member_id_required
        second = self.join_group(group_id, first.response.member_id, version=version, **kwargs)
        assert not second.records and not second.done
        self.advance(self.shard.settings.group_initial_rebalance_delay_ms)
        assert second.error == ErrorCode.none
        return second.response

    def join_as_dynamic_member_and_complete_rebalance(self, group_id: str = "group-id", **kwargs: Any) -> Any:
        kwargs.setdefault("rebalance_timeout_ms", 10000)
        kwargs.setdefault("session_timeout_ms", 5000)
        leader = self.join_as_dynamic_member_and_complete_join(group_id, **kwargs)
        assert leader.generation_id == 1
        sync = self.sync_group(group_id, leader.member_id, leader.generation_id)
        assert sync.error == ErrorCode.none
        assert self.group(group_id).state.value == "Stable"
        return leader

    def static_members_join_and_rebalance(
        self,
        group_id: str = "group-id",
        leader_instance_id: str = "leader",
        follower_instance_id: str = "follower",
        *,
        rebalance_timeout_ms: int = 10000,
        session_timeout_ms: int = 5000,
        version: int = 5,
    ) -> RebalanceResult:
        """Kafka's staticMembersJoinAndRebalance: two static members, generation 1, assignments 1 and 2."""
        kwargs = dict(
            protocols=to_protocols("range", "roundrobin"),
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            version=version,
        )
        leader_join = self.join_group(group_id, group_instance_id=leader_instance_id, **kwargs)
        follower_join = self.join_group(group_id, group_instance_id=follower_instance_id, **kwargs)
        assert not leader_join.done and not follower_join.done
        delay = self.shard.settings.group_initial_rebalance_delay_ms
        self.advance(delay)
        self.advance(delay)
        assert leader_join.error == ErrorCode.none and follower_join.error == ErrorCode.none
        assert leader_join.response.generation_id == follower_join.response.generation_id == 1
        leader_id = leader_join.response.member_id
        follower_id = follower_join.response.member_id
        leader_sync = self.sync_group(
            group_id,
            leader_id,
            1,
            group_instance_id=leader_instance_id,
            assignments={leader_id: b"\x01", follower_id: b"\x02"},
        )
        assert leader_sync.error == ErrorCode.none
        follower_sync = self.sync_group(group_id, follower_id, 1, group_instance_id=follower_instance_id)
        assert follower_sync.error == ErrorCode.none
        group = self.group(group_id)
        assert group.state.value == "Stable" and group.num_members() == 2 and group.generation_id == 1
        return RebalanceResult(
            1, leader_id, leader_sync.response.assignment, follower_id, follower_sync.response.assignment
        )

    def two_members_stable(self, group_id: str = "group-id", *, version: int = 5) -> RebalanceResult:
        """Two dynamic members join together, the leader assigns 1 and 2, both sync: generation 1, Stable."""
        kwargs = dict(rebalance_timeout_ms=10000, session_timeout_ms=5000, version=version)
        leader_join = self.join_group(group_id, **{**kwargs, "version": 3})
        follower_join = self.join_group(group_id, **{**kwargs, "version": 3})
        self.advance(self.shard.settings.group_initial_rebalance_delay_ms)
        self.advance(self.shard.settings.group_initial_rebalance_delay_ms)  # the second member extended it
        leader_id = leader_join.response.member_id
        follower_id = follower_join.response.member_id
        assert leader_join.response.leader == leader_id
        leader_sync = self.sync_group(
            group_id, leader_id, 1, assignments={leader_id: b"\x01", follower_id: b"\x02"}
        )
        follower_sync = self.sync_group(group_id, follower_id, 1)
        assert leader_sync.error == follower_sync.error == ErrorCode.none
        assert self.group(group_id).state.value == "Stable"
        return RebalanceResult(
            1, leader_id, leader_sync.response.assignment, follower_id, follower_sync.response.assignment
        )

    def setup_group_with_pending_member(self, group_id: str = "group-id") -> PendingMemberGroupResult:
        """Kafka's setupGroupWithPendingMember: a Stable group of two rebalancing again, the leader and the
        follower waiting in JoinGroup and one KIP-394 pending member id (session 2500 ms) outstanding."""
        kwargs = dict(rebalance_timeout_ms=10000, session_timeout_ms=5000)
        leader = self.join_as_dynamic_member_and_complete_join(group_id, **kwargs)
        leader_id = leader.member_id
        assert self.sync_group(group_id, leader_id, leader.generation_id).error == ErrorCode.none
        follower_join = self.join_group(group_id, **kwargs)
        assert not follower_join.done
        leader_join = self.join_group(group_id, leader_id, **kwargs)
        assert self.group(group_id).state.value == "CompletingRebalance"
        assert leader_join.error == follower_join.error == ErrorCode.none
        generation_id = leader_join.response.generation_id
        follower_id = follower_join.response.member_id
        assert self.sync_group(group_id, leader_id, generation_id).error == ErrorCode.none
        assert self.group(group_id).state.value == "Stable"
        leader_join = self.join_group(group_id, leader_id, **kwargs)
        assert not leader_join.done
        assert self.group(group_id).state.value == "PreparingRebalance"
        pending = self.join_group(group_id, version=4, rebalance_timeout_ms=10000, session_timeout_ms=2500)
        assert pending.error == ErrorCode.member_id_required
        follower_join = self.join_group(group_id, follower_id, **kwargs)
        assert not follower_join.done
        assert self.group(group_id).num_members() == 2
        assert self.group(group_id).num_pending_join_members() == 1
        return PendingMemberGroupResult(
            leader_id, follower_id, pending.response.member_id, leader_join, follower_join
        )

    def join_with_n_members(
        self, n: int, rebalance_timeout_ms: int, session_timeout_ms: int, group_id: str = "group-id"
    ) -> list[Any]:
        """Kafka's joinWithNMembers: n KIP-394 members; the first rebalance completes after the initial delay
        and a rebalance timeout. The JoinGroup answers, leader first."""
        self.create_group(group_id)
        kwargs = dict(
            rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms, version=4
        )
        member_ids = []
        for _ in range(n):
            call = self.join_group(group_id, **kwargs)
            assert not call.records and call.error == ErrorCode.member_id_required
            member_ids.append(call.response.member_id)
        joins = [self.join_group(group_id, member_id, **kwargs) for member_id in member_ids]
        assert not any(c.done for c in joins)
        self.advance(self.shard.settings.group_initial_rebalance_delay_ms)
        assert not any(c.done for c in joins)
        self.advance(rebalance_timeout_ms)
        assert all(c.error == ErrorCode.none for c in joins)
        assert self.group(group_id).num_members() == n
        assert self.group(group_id).state.value == "CompletingRebalance"
        return [c.response for c in joins]

    def verify_heartbeat(self, response: Any, expected: ErrorCode, group_id: str = "group-id") -> None:
        call = self.heartbeat(group_id, response.member_id, response.generation_id)
        assert call.error == expected

    def create_group(self, group_id: str = "group-id") -> ClassicGroup:
        """Kafka's context.createClassicGroup: the group exists in memory, no record written."""
        return self.shard.classic.create_group(group_id)

    # -- inspection ------------------------------------------------------------------------------------------

    def group(self, group_id: str = "group-id") -> ClassicGroup:
        return self.shard.groups[group_id]

    def deadline(self, key: str) -> int | None:
        """Milliseconds from now until the operation under `key` fires, or None."""
        deadline = self.timer.deadline_ms(key)
        return None if deadline is None else deadline - self.clock.monotonic_ms()

    def session_deadline(self, member_id: str, group_id: str = "group-id") -> int | None:
        return self.deadline(session_timeout_key(group_id, member_id))

    def join_deadline(self, group_id: str = "group-id") -> int | None:
        return self.deadline(join_key(group_id))

    def sync_deadline(self, group_id: str = "group-id") -> int | None:
        return self.deadline(sync_key(group_id))

    def expected_group_metadata(
        self, group_id: str = "group-id", assignments: dict[str, bytes] | None = None
    ) -> Any:
        group = self.group(group_id)
        return group_metadata_value(group, group.group_assignment() if assignments is None else assignments)


def decoded(records: Iterable[CoordinatorRecord]) -> list[tuple[Any, Any]]:
    return [decode_record(r) for r in records]


@dataclasses.dataclass(frozen=True)
class PendingMemberGroupResult:
    leader_id: str
    follower_id: str
    pending_member_id: str
    leader_join: Call
    follower_join: Call


@dataclasses.dataclass(frozen=True)
class RebalanceResult:
    generation_id: int
    leader_id: str
    leader_assignment: bytes
    follower_id: str
    follower_assignment: bytes
