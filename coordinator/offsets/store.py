"""Committed offsets of one shard, changed only by replaying OffsetCommit records.

`replay` is the only writer: a commit handler emits records, and the offsets appear here once the runtime has
made those records durable and replayed them — while serving and while loading the log alike, so the store
always equals what the log says. Between the two moments a commit is *pending*: the store counts pending
commits per partition so that a RequireStable fetch can tell an in-flight commit from a settled one, and so
that deleting a group's offsets also covers commits still on their way to the log.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

from coordinator.records import OffsetCommitKey, OffsetCommitValue


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int  # -1: none (v1 records of KIP-211-era clients carry one)

    @classmethod
    def from_record(cls, value: OffsetCommitValue) -> OffsetAndMetadata:
        return cls(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                   value.expire_timestamp_ms)

    def is_expired(self, now_ms: int, retention_ms: int, base_timestamp_ms: int) -> bool:
        """KIP-211: an explicit expire timestamp wins; otherwise retention counts from `base_timestamp_ms`."""
        if self.expire_timestamp_ms != -1:
            return now_ms >= self.expire_timestamp_ms
        return now_ms - base_timestamp_ms >= retention_ms


TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self) -> None:
        self._offsets: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
        self._pending: dict[str, collections.Counter[TopicPartition]] = {}

    # -- committed -------------------------------------------------------------------------------------------

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self._offsets.get(group_id, {}).get(topic, {}).get(partition)

    def group_offsets(self, group_id: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        """topic -> partition -> offset, for one group (a copy)."""
        return {topic: dict(partitions) for topic, partitions in self._offsets.get(group_id, {}).items()}

    def partitions(self, group_id: str) -> Iterator[tuple[str, int, OffsetAndMetadata]]:
        for topic, partitions in list(self._offsets.get(group_id, {}).items()):
            for partition, offset in list(partitions.items()):
                yield topic, partition, offset

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    def num_offsets(self) -> int:
        return sum(len(p) for topics in self._offsets.values() for p in topics.values())

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is not None:
            by_topic = self._offsets.setdefault(key.group, {})
            by_topic.setdefault(key.topic, {})[key.partition] = OffsetAndMetadata.from_record(value)
            return
        topics = self._offsets.get(key.group)
        if topics is None:
            return
        partitions = topics.get(key.topic)
        if partitions is None:
            return
        partitions.pop(key.partition, None)
        if not partitions:
            del topics[key.topic]
        if not topics:
            del self._offsets[key.group]

    # -- pending (emitted, not yet durable) ------------------------------------------------------------------

    def add_pending(self, group_id: str, topic: str, partition: int) -> None:
        self._pending.setdefault(group_id, collections.Counter())[(topic, partition)] += 1

    def remove_pending(self, group_id: str, topic: str, partition: int) -> None:
        counter = self._pending.get(group_id)
        if counter is None or counter[(topic, partition)] <= 0:
            return
        counter[(topic, partition)] -= 1
        if counter[(topic, partition)] == 0:
            del counter[(topic, partition)]
        if not counter:
            del self._pending[group_id]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return self._pending.get(group_id, collections.Counter())[(topic, partition)] > 0

    def pending_partitions(self, group_id: str) -> list[TopicPartition]:
        return list(self._pending.get(group_id, {}))
