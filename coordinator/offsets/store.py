"""Committed offsets of one shard, changed only by replaying OffsetCommit records.

`replay` is the only writer: a commit handler emits records, and the offsets appear here once the runtime has
made those records durable and replayed them — while serving and while loading the log alike, so the store
always equals what the log says. Between the two moments a commit is *pending*: the store counts pending
commits per partition so that a RequireStable fetch can tell an in-flight commit from a settled one, and so
that deleting a group's offsets also covers commits still on their way to the log.

A shard may hold millions of offsets, so the store keeps each one compactly: as a single int packing the
offset, the commit timestamp and the leader epoch, whenever the offset has no metadata and no expire timestamp
(almost always); as an `OffsetAndMetadata` otherwise. A packed offset takes 48 bytes and is no object the
garbage collector has to walk, where an `OffsetAndMetadata` with its two ints takes about 140. The methods
that return offsets build `OffsetAndMetadata`s from packed ones as they go, `group_offsets` only when a value
is looked up (see `PartitionOffsets`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

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
        return cls(
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp_ms,
            value.expire_timestamp_ms,
        )

    def is_expired(self, now_ms: int, retention_ms: int, base_timestamp_ms: int) -> bool:
        """KIP-211: an explicit expire timestamp wins; otherwise retention counts from `base_timestamp_ms`."""
        if self.expire_timestamp_ms != -1:
            return now_ms >= self.expire_timestamp_ms
        return now_ms - base_timestamp_ms >= retention_ms


TopicPartition = tuple[str, int]

# A packed offset: bits 0-63 the committed offset, 64-127 the commit timestamp, 128 and up the leader epoch
# + 1; the metadata is "" and the expire timestamp -1. Only offsets and timestamps in [0, 2**63) and epochs
# >= -1 are packed (records hold int64 and int32), so the fields never overlap.
_MASK_64 = (1 << 64) - 1
_LIMIT_63 = 1 << 63

# OffsetAndMetadata(...) without its generated __init__, which costs an object.__setattr__ per field.
_new_object = object.__new__
_SET_OFFSET, _SET_EPOCH, _SET_METADATA, _SET_COMMIT, _SET_EXPIRE = (
    OffsetAndMetadata.__dict__[name].__set__
    for name in ("committed_offset", "leader_epoch", "metadata", "commit_timestamp_ms", "expire_timestamp_ms")
)


def _pack(value: OffsetCommitValue) -> int | OffsetAndMetadata:
    offset = value.offset
    commit_timestamp_ms = value.commit_timestamp_ms
    leader_epoch = value.leader_epoch
    if (
        value.metadata == ""
        and value.expire_timestamp_ms == -1
        and 0 <= offset < _LIMIT_63
        and 0 <= commit_timestamp_ms < _LIMIT_63
        and -1 <= leader_epoch < _LIMIT_63
    ):
        return ((leader_epoch + 1) << 128) | (commit_timestamp_ms << 64) | offset
    return OffsetAndMetadata.from_record(value)


def _unpack(stored: int | OffsetAndMetadata) -> OffsetAndMetadata:
    if type(stored) is not int:
        return stored  # type: ignore[return-value]
    offset = _new_object(OffsetAndMetadata)
    _SET_OFFSET(offset, stored & _MASK_64)
    _SET_EPOCH(offset, (stored >> 128) - 1)
    _SET_METADATA(offset, "")
    _SET_COMMIT(offset, (stored >> 64) & _MASK_64)
    _SET_EXPIRE(offset, -1)
    return offset


_NONE: dict[Any, Any] = {}  # read-only stand-in for a missing level


class PartitionOffsets(Mapping[int, OffsetAndMetadata]):
    """partition -> offset for one topic of a group, as `OffsetStore.group_offsets` returns it: a read-only
    snapshot that builds each OffsetAndMetadata when it is looked up.

    Taking one is as cheap as copying a dict, so callers may take them for every group often (the lag
    sampler does, for the topic names alone) without building an object per offset.
    """

    __slots__ = ("_stored",)

    def __init__(self, stored: dict[int, int | OffsetAndMetadata]) -> None:
        self._stored = stored  # a copy of the store's dict, owned by this snapshot

    def __getitem__(self, partition: int) -> OffsetAndMetadata:
        return _unpack(self._stored[partition])

    def __iter__(self) -> Iterator[int]:
        return iter(self._stored)

    def __len__(self) -> int:
        return len(self._stored)

    def __contains__(self, partition: object) -> bool:
        return partition in self._stored

    def copy(self) -> dict[int, OffsetAndMetadata]:
        return {partition: _unpack(stored) for partition, stored in self._stored.items()}

    def __repr__(self) -> str:
        return f"PartitionOffsets({self.copy()!r})"


class OffsetStore:
    def __init__(self) -> None:
        # group -> topic -> partition -> packed offset or OffsetAndMetadata (see the module doc)
        self._offsets: dict[str, dict[str, dict[int, int | OffsetAndMetadata]]] = {}
        self._pending: dict[str, dict[TopicPartition, int]] = {}  # group -> partition -> commits on their way
        # The partitions dict replay_commit wrote to last, with its group and topic (the very str objects of
        # that key): records come in runs of one group and topic, whose keys share those strings (see
        # coordinator.records._last_key_prefix). Forgotten whenever a dict may be dropped.
        self._last: tuple[str, str, dict[int, int | OffsetAndMetadata]] | None = None

    # -- committed -------------------------------------------------------------------------------------------

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        stored = self._offsets.get(group_id, _NONE).get(topic, _NONE).get(partition)
        return None if stored is None else _unpack(stored)

    def group_offsets(self, group_id: str) -> dict[str, PartitionOffsets]:
        """topic -> partition -> offset, for one group (a copy; the OffsetAndMetadata are built on lookup)."""
        return {
            topic: PartitionOffsets(dict(partitions))
            for topic, partitions in self._offsets.get(group_id, _NONE).items()
        }

    def topics(self, group_id: str) -> list[str]:
        """The topics the group has committed offsets for (cheaper than `group_offsets` when that is all)."""
        return list(self._offsets.get(group_id, _NONE))

    def partition_keys(self, group_id: str) -> list[TopicPartition]:
        """(topic, partition) of every committed offset of the group (`partitions` without the offsets)."""
        return [
            (topic, partition)
            for topic, partitions in self._offsets.get(group_id, _NONE).items()
            for partition in partitions
        ]

    def partitions(self, group_id: str) -> Iterator[tuple[str, int, OffsetAndMetadata]]:
        for topic, partitions in list(self._offsets.get(group_id, _NONE).items()):
            for partition, stored in list(partitions.items()):
                yield topic, partition, _unpack(stored)

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    def num_offsets(self) -> int:
        return sum(len(p) for topics in self._offsets.values() for p in topics.values())

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is not None:
            topics = self._offsets.get(key.group)
            if topics is None:
                topics = self._offsets[key.group] = {}
            partitions = topics.get(key.topic)
            if partitions is None:
                partitions = topics[key.topic] = {}
            partitions[key.partition] = _pack(value)
            return
        self._delete(key)

    def _partitions_of(self, group: str, topic: str) -> dict[int, int | OffsetAndMetadata]:
        """The partitions of `topic` in `group`, created if missing; the last pair is remembered, since a log
        holds runs of one group's topic (a commit writes one record per partition)."""
        last = self._last
        if last is not None and last[0] is group and last[1] is topic:
            return last[2]
        topics = self._offsets.get(group)
        if topics is None:
            topics = self._offsets[group] = {}
        partitions = topics.get(topic)
        if partitions is None:
            partitions = topics[topic] = {}
        self._last = (group, topic, partitions)
        return partitions

    def replay_simple(
        self, group: str, topic: str, partition: int, offset: int, leader_epoch: int, commit_timestamp_ms: int
    ) -> None:
        """`replay_commit` of a commit without metadata, from its fields (records.simple_offset_commit)."""
        if self._pending:
            self.remove_pending(group, topic, partition)
        partitions = self._partitions_of(group, topic)
        if (
            0 <= offset < _LIMIT_63
            and 0 <= commit_timestamp_ms < _LIMIT_63
            and -1 <= leader_epoch < _LIMIT_63
        ):
            partitions[partition] = (
                ((leader_epoch + 1) << 128) | (commit_timestamp_ms << 64) | offset
            )  # = _pack
        else:
            partitions[partition] = OffsetAndMetadata(offset, leader_epoch, "", commit_timestamp_ms, -1)

    def replay_commit(self, key: OffsetCommitKey, value: OffsetCommitValue) -> None:
        """Replay a durable commit that may have been pending: `remove_pending`, then `replay`, in one call."""
        if value.metadata == "" and value.expire_timestamp_ms == -1:
            self.replay_simple(
                key.group,
                key.topic,
                key.partition,
                value.offset,
                value.leader_epoch,
                value.commit_timestamp_ms,
            )
            return
        if self._pending:
            self.remove_pending(key.group, key.topic, key.partition)
        self._partitions_of(key.group, key.topic)[key.partition] = OffsetAndMetadata.from_record(value)

    def _delete(self, key: OffsetCommitKey) -> None:
        self._last = None
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
        counts = self._pending.get(group_id)
        if counts is None:
            counts = self._pending[group_id] = {}
        key = (topic, partition)
        counts[key] = counts.get(key, 0) + 1

    def remove_pending(self, group_id: str, topic: str, partition: int) -> None:
        counts = self._pending.get(group_id)
        if counts is None:
            return
        key = (topic, partition)
        n = counts.get(key, 0)
        if n > 1:
            counts[key] = n - 1
        elif n == 1:
            del counts[key]
            if not counts:
                del self._pending[group_id]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        counts = self._pending.get(group_id)
        return counts is not None and counts.get((topic, partition), 0) > 0

    def pending_partitions(self, group_id: str) -> list[TopicPartition]:
        return list(self._pending.get(group_id, {}))
