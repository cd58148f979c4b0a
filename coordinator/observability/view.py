"""A read-only view of one shard's groups for the admin API and the metrics: states, members, decoded
assignments, committed offsets against log-end offsets, lag in offsets and in seconds, and rebalance history.

It reads the state machine between calls (on the event loop, so it sees a consistent state) and never changes it.
Committed offsets are the durable ones: they change only when their records are replayed after the fsync.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from coordinator.consumer.group import ConsumerGroup
from coordinator.consumer.manager import ConsumerGroupSettings
from coordinator.group.group import ClassicGroup, ClassicGroupMember
from coordinator.group.pause import PauseState
from coordinator.offsets.store import OffsetAndMetadata
from protocol.consumer import assignment_partitions, decode_assignment, parse_subscription_topics

from .consumer_groups import ConsumerGroupFacade
from .history import GroupHistory, member_json
from .lag import GroupLag, LagHistory, OffsetHistory, group_lag

HOUR_MS = 3_600_000


class OffsetsReader(Protocol):
    """The committed offsets, read (coordinator.offsets.store.OffsetStore, or every shard's seen as one)."""

    def group_offsets(self, group_id: str) -> Mapping[str, Mapping[int, OffsetAndMetadata]]: ...

    def topics(self, group_id: str) -> list[str]: ...

    def num_offsets(self) -> int: ...


class _Offsets(Protocol):
    @property
    def store(self) -> OffsetsReader: ...


class GroupsSource(Protocol):
    """What the view reads: a shard (coordinator.shard.GroupCoordinatorShard) or every shard of a server seen as
    one (coordinator.server.shards.ShardedView)."""

    @property
    def groups(self) -> Mapping[str, ClassicGroup]: ...

    @property
    def consumer_groups(self) -> Mapping[str, ConsumerGroup]: ...

    def consumer_topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    @property
    def consumer_settings(self) -> ConsumerGroupSettings: ...

    @property
    def offsets(self) -> _Offsets: ...

    def pause_state(self, group_id: str) -> PauseState: ...


class CoordinatorView:
    def __init__(
        self,
        shards: GroupsSource,
        dataplane: Any,
        history: GroupHistory,
        offset_history: OffsetHistory | None = None,
        *,
        lag_history: LagHistory | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.shards = shards
        self.dataplane = dataplane
        self.history = history
        self.offset_history = offset_history or OffsetHistory()
        self.lag_history = lag_history or LagHistory(self.offset_history.max_samples)
        self.monotonic = monotonic
        self.wall_ms = wall_ms

    # -- facts -----------------------------------------------------------------------------------------------

    def groups(self) -> Iterator[Any]:
        """Every group: the classic ones, and the consumer groups (KIP-848) as ConsumerGroupFacades."""
        return iter(
            [*self.shards.groups.values(), *map(self._facade, list(self.shards.consumer_groups.values()))]
        )

    def group(self, group_id: str) -> Any:
        group = self.shards.groups.get(group_id)
        if group is not None:
            return group
        consumer_group = self.shards.consumer_groups.get(group_id)
        return None if consumer_group is None else self._facade(consumer_group)

    def _facade(self, group: ConsumerGroup) -> ConsumerGroupFacade:
        settings = self.shards.consumer_settings
        return ConsumerGroupFacade(
            group, self.shards.consumer_topic_name, settings.assignors[0], settings.session_timeout_ms
        )

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        if self.dataplane is None:
            return None
        return self.dataplane.log_end_offset(topic, partition)

    def partition_count(self, topic: str) -> int | None:
        if self.dataplane is None:
            return None
        return self.dataplane.partition_count(topic)

    def lag(self, group: ClassicGroup) -> GroupLag:
        offsets = self.shards.offsets.store.group_offsets(group.group_id)
        subscribed = group.subscribed_topics or () if group.uses_consumer_protocol() else ()
        return group_lag(offsets, self.log_end_offset, self.partition_count, subscribed)

    def owners(self, group: ClassicGroup) -> dict[tuple[str, int], ClassicGroupMember]:
        """(topic, partition) -> the member the current assignment gives it to (consumer-protocol groups)."""
        out: dict[tuple[str, int], ClassicGroupMember] = {}
        if not group.uses_consumer_protocol():
            return out
        for member in group.all_members():
            for topic, partitions in (assignment_partitions(member.assignment) or {}).items():
                for partition in partitions:
                    out[(topic, partition)] = member
        return out

    def lag_seconds(
        self,
        topic: str,
        partition: int,
        committed: int,
        log_end_offset: int | None,
        now_s: float | None = None,
    ) -> float | None:
        if log_end_offset is None:
            return None
        now = self.monotonic() if now_s is None else now_s
        return self.offset_history.lag_seconds(topic, partition, committed, log_end_offset, now)

    def sample(self, now_s: float | None = None, wall_ms: int | None = None) -> int:
        """Record the log-end offset of every partition some group consumes, and the lag per partition of the
        groups whose lag history is watched; returns how many partitions."""
        now = self.monotonic() if now_s is None else now_s
        wall = self.wall_ms() if wall_ms is None else wall_ms
        keys: set[tuple[str, int]] = set()
        for group in self.groups():
            topics = set(self.shards.offsets.store.topics(group.group_id))
            if group.uses_consumer_protocol() and group.subscribed_topics:
                topics |= group.subscribed_topics
            for topic in topics:
                count = self.partition_count(topic)
                for partition in range(count or 0):
                    keys.add((topic, partition))
        for topic, partition in keys:
            leo = self.log_end_offset(topic, partition)
            if leo is not None:
                self.offset_history.record(topic, partition, leo, now)
        self.offset_history.retain(keys)
        for group_id in self.lag_history.watched(wall):
            self._record_lag(group_id, wall)
        return len(keys)

    def _record_lag(self, group_id: str, wall_ms: int) -> None:
        group = self.group(group_id)
        if group is None:
            self.lag_history.retain(group_id, ())
            return
        present = []
        for p in self.lag(group).partitions:
            if p.lag is not None:
                self.lag_history.record(group_id, p.topic, p.partition, wall_ms, p.lag)
                present.append((p.topic, p.partition))
        self.lag_history.retain(group_id, present)

    # -- JSON for the admin API ------------------------------------------------------------------------------

    def list_json(self, wall_now_ms: int | None = None) -> list[dict[str, Any]]:
        wall = self.wall_ms() if wall_now_ms is None else wall_now_ms
        now = self.monotonic()
        out = []
        for group in sorted(self.groups(), key=lambda g: g.group_id):
            lag = self.lag(group)
            seconds = [
                self.lag_seconds(p.topic, p.partition, p.committed_offset, p.log_end_offset, now)
                for p in lag.partitions
            ]
            known = [s for s in seconds if s is not None]
            paused = self.shards.pause_state(group.group_id)
            last = self.history.last(group.group_id)
            out.append(
                {
                    "group_id": group.group_id,
                    "type": getattr(group, "group_type", "classic"),
                    "state": str(group.state),
                    "protocol_type": group.protocol_type or "",
                    "protocol": group.protocol_name or "",
                    "generation": group.generation_id,
                    "members": group.num_members(),
                    "lag": lag.lag_sum() if lag.has_lag() else None,
                    "lag_seconds": round(max(known), 3) if known else None,
                    "uncommitted_partitions": sum(lag.uncommitted.values()),
                    "topics": lag.topics(),
                    "paused": paused.to_json() if paused.is_paused else None,
                    "rebalances_last_hour": self.history.rebalances_since(group.group_id, wall - HOUR_MS),
                    "last_rebalance_reason": last.reason.value if last is not None else None,
                }
            )
        return out

    def lag_history_json(self, group_id: str) -> list[dict[str, Any]]:
        """The group's lag per partition at each sample: [{topic, partition, points: [[wall ms, lag], ...]}].
        Asking watches the group (LagHistory): a group asked for the first time gets its first point now."""
        wall = self.wall_ms()
        if self.lag_history.watch(group_id, wall):
            self._record_lag(group_id, wall)
        return [
            {"topic": topic, "partition": partition, "points": [list(p) for p in points]}
            for (topic, partition), points in self.lag_history.series(group_id).items()
        ]

    def describe_json(self, group: ClassicGroup, wall_now_ms: int | None = None) -> dict[str, Any]:
        lag = self.lag(group)
        owners = self.owners(group)
        now = self.monotonic()
        members = []
        for member in group.all_members():
            subscription = None
            if group.uses_consumer_protocol() and group.protocol_name is not None:
                try:
                    subscription = parse_subscription_topics(member.metadata(group.protocol_name))
                except KeyError:
                    subscription = None
            assignment = assignment_partitions(member.assignment) if group.uses_consumer_protocol() else None
            members.append(
                {
                    "member_id": member.member_id,
                    "group_instance_id": member.group_instance_id,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "session_timeout_ms": member.session_timeout_ms,
                    "rebalance_timeout_ms": member.rebalance_timeout_ms,
                    "leader": group.is_leader(member.member_id),
                    "subscription": sorted(subscription) if subscription is not None else None,
                    "assignment": [{"topic": t, "partitions": ps} for t, ps in sorted(assignment.items())]
                    if assignment is not None
                    else None,
                    "assignment_bytes": len(member.assignment),
                    **(member.extra_json() if hasattr(member, "extra_json") else {}),
                }
            )
        offsets = []
        for p in lag.partitions:
            owner = owners.get((p.topic, p.partition))
            seconds = self.lag_seconds(p.topic, p.partition, p.committed_offset, p.log_end_offset, now)
            offsets.append(
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed_offset": p.committed_offset,
                    "log_end_offset": p.log_end_offset,
                    "lag": p.lag,
                    "lag_seconds": round(seconds, 3) if seconds is not None else None,
                    "metadata": p.metadata,
                    "commit_timestamp_ms": p.commit_timestamp_ms,
                    "member_id": owner.member_id if owner else None,
                    "client_id": owner.client_id if owner else None,
                    "client_host": owner.client_host if owner else None,
                }
            )
        last = self.history.last(group.group_id)
        return {
            "group_id": group.group_id,
            "type": getattr(group, "group_type", "classic"),
            **(group.extra_json() if hasattr(group, "extra_json") else {}),
            "state": str(group.state),
            "state_since_ms": group.current_state_timestamp_ms,
            "protocol_type": group.protocol_type or "",
            "protocol": group.protocol_name or "",
            "generation": group.generation_id,
            "leader": group.leader_id,
            "members": members,
            "pending_members": group.num_pending_join_members(),
            "paused": self.shards.pause_state(group.group_id).to_json(),
            "offsets": offsets,
            "lag": lag.lag_sum() if lag.has_lag() else None,
            "uncommitted_partitions": dict(lag.uncommitted),
            "last_rebalance": last.to_json(wall_now_ms) if last is not None else None,
            "rebalances": self.history.rebalances(group.group_id),
        }

    def paused_partitions(self, group: Any) -> int:
        """Partitions of the group's stored assignments that the coordinator withholds because they are paused."""
        state = self.shards.pause_state(group.group_id)
        if not state.is_paused or not group.uses_consumer_protocol():
            return 0
        count = 0
        for member in group.all_members():
            if not member.assignment:
                continue
            try:
                assignment = decode_assignment(member.assignment)
            except ValueError:
                continue
            count += sum(
                len(partitions) for topic, partitions in assignment.partitions if state.withholds(topic)
            )
        return count

    def timeline_json(
        self, group_id: str, limit: int | None = None, wall_now_ms: int | None = None
    ) -> list[dict[str, Any]]:
        return [r.to_json(wall_now_ms) for r in self.history.timeline(group_id, limit)]


__all__ = ["CoordinatorView", "member_json"]
