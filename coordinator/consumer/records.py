"""The records of consumer groups (KIP-848), in the key/value layout of Kafka's `__consumer_offsets`.

Keys are non-flexible (int16 type, then the key struct at version 0); values are an int16 version (0) and a
flexible struct (compact strings and arrays, tagged fields). Field order and types follow apache/kafka's
group-coordinator/src/main/resources/common/message/ConsumerGroup*{Key,Value}.json (4.1):

    type 3  ConsumerGroupMetadataKey {group}
            value {epoch: int32; tag 0: metadata_hash: int64}
    type 5  ConsumerGroupMemberMetadataKey {group, member_id}
            value {instance_id: string?, rack_id: string?, client_id, client_host, subscribed_topic_names:
                   [string], subscribed_topic_regex: string?, rebalance_timeout_ms: int32, server_assignor:
                   string?; tag 0: classic_member_metadata {session_timeout_ms: int32,
                   supported_protocols: [{name: string, metadata: bytes}]}? (set for a member using the
                   classic protocol inside a consumer group)}
    type 6  ConsumerGroupTargetAssignmentMetadataKey {group}
            value {assignment_epoch: int32}
    type 7  ConsumerGroupTargetAssignmentMemberKey {group, member_id}
            value {topic_partitions: [{topic_id: uuid, partitions: [int32]}]}
    type 8  ConsumerGroupCurrentMemberAssignmentKey {group, member_id}
            value {member_epoch: int32, previous_member_epoch: int32, state: int8, assigned_partitions: [...],
                   partitions_pending_revocation: [...]}  (both [{topic_id: uuid, partitions: [int32]}])

Type 4 (ConsumerGroupPartitionMetadata, written by Kafka 4.0 and only tombstoned since 4.1) is read and
ignored; type 16 (resolved regular expressions) is not written: a regular expression is resolved again from
the topics when the group is loaded. Decoding never trusts its input: anything malformed raises
RecordDecodeError.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from coordinator.records import CoordinatorRecord, RecordDecodeError, _Reader, _Writer

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
RECORD_TYPES = frozenset(
    {
        GROUP_METADATA,
        PARTITION_METADATA,
        MEMBER_METADATA,
        TARGET_ASSIGNMENT_METADATA,
        TARGET_ASSIGNMENT_MEMBER,
        CURRENT_MEMBER_ASSIGNMENT,
        REGULAR_EXPRESSION,
    }
)
_WITH_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerRecordKey:
    type: int
    group: str
    member_id: str = ""  # types 5, 7, 8; the regular expression for type 16


@dataclasses.dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member using the classic protocol (JoinGroup/SyncGroup) inside a consumer group joined with."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order of preference


@dataclasses.dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment


@dataclasses.dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


ConsumerRecordValue = (
    GroupMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)


def record_type(key: bytes) -> int:
    return int.from_bytes(key[:2], "big", signed=True) if len(key) >= 2 else -1


def is_consumer_record(key: bytes) -> bool:
    return record_type(key) in RECORD_TYPES


# -- encoding ------------------------------------------------------------------------------------------------


def encode_key(key: ConsumerRecordKey) -> bytes:
    w = _Writer(flexible=False)
    w.i16(key.type)
    w.string(key.group)
    if key.type in _WITH_MEMBER or key.type == REGULAR_EXPRESSION:
        w.string(key.member_id)
    return bytes(w.buf)


def _topic_partitions(w: _Writer, assignment: Assignment) -> None:
    items = sorted((t, sorted(ps)) for t, ps in assignment.items() if ps)
    w.array_length(len(items))
    for topic_id, partitions in items:
        w.buf += topic_id.bytes
        w.array_length(len(partitions))
        for p in partitions:
            w.i32(p)
        w.tagged_fields()


def encode_value(value: ConsumerRecordValue) -> bytes:
    w = _Writer(flexible=True)
    w.i16(VALUE_VERSION)
    if isinstance(value, GroupMetadataValue):
        w.i32(value.epoch)
        if value.metadata_hash:
            w.uvarint(1)  # one tagged field: tag 0, 8 bytes
            w.uvarint(0)
            w.uvarint(8)
            w.i64(value.metadata_hash)
            return bytes(w.buf)
    elif isinstance(value, MemberMetadataValue):
        w.string(value.instance_id, nullable=True)
        w.string(value.rack_id, nullable=True)
        w.string(value.client_id)
        w.string(value.client_host)
        w.strings(value.subscribed_topic_names)
        w.string(value.subscribed_topic_regex, nullable=True)
        w.i32(value.rebalance_timeout_ms)
        w.string(value.server_assignor, nullable=True)
        if value.classic is not None:
            inner = _Writer(flexible=True)
            inner.i32(value.classic.session_timeout_ms)
            inner.array_length(len(value.classic.protocols))
            for name, metadata in value.classic.protocols:
                inner.string(name)
                inner.bytes_(metadata)
                inner.tagged_fields()
            inner.tagged_fields()
            w.uvarint(1)  # one tagged field: tag 0
            w.uvarint(0)
            w.uvarint(len(inner.buf))
            w.buf += inner.buf
            return bytes(w.buf)
    elif isinstance(value, TargetAssignmentMetadataValue):
        w.i32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        _topic_partitions(w, value.partitions)
    elif isinstance(value, CurrentMemberAssignmentValue):
        w.i32(value.member_epoch)
        w.i32(value.previous_member_epoch)
        w.buf += value.state.to_bytes(1, "big", signed=True)
        _topic_partitions(w, value.assigned)
        _topic_partitions(w, value.pending_revocation)
    else:
        raise TypeError(f"not a consumer group record value: {value!r}")
    w.tagged_fields()
    return bytes(w.buf)


def record(key: ConsumerRecordKey, value: ConsumerRecordValue | None) -> CoordinatorRecord:
    return CoordinatorRecord(encode_key(key), None if value is None else encode_value(value))


# -- decoding ------------------------------------------------------------------------------------------------


def decode_key(data: bytes) -> ConsumerRecordKey:
    r = _Reader(data)
    kind = r.i16()
    if kind not in RECORD_TYPES:
        raise RecordDecodeError(f"not a consumer group record type: {kind}")
    group = r.str_()
    member = r.str_() if kind in _WITH_MEMBER or kind == REGULAR_EXPRESSION else ""
    r.end()
    return ConsumerRecordKey(kind, group, member)


def _read_topic_partitions(r: _Reader) -> dict[uuid.UUID, frozenset[int]]:
    result: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.array_length()):
        topic_id = uuid.UUID(bytes=r._take(16).tobytes())
        partitions = frozenset(r.i32() for _ in range(r.array_length()))
        r.skip_tagged_fields()
        result[topic_id] = partitions
    return result


def _tagged_fields(r: _Reader) -> dict[int, bytes]:
    tags: dict[int, bytes] = {}
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        tags[tag] = r._take(r.uvarint()).tobytes()
    return tags


def _classic_member_metadata(data: bytes) -> ClassicMemberMetadata:
    r = _Reader(data, flexible=True)
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(r.array_length()):
        name = r.str_()
        metadata = r.bytes_()
        r.skip_tagged_fields()
        protocols.append((name, metadata))
    r.skip_tagged_fields()
    r.end()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def decode_value(key: ConsumerRecordKey, data: bytes | None) -> Any:
    """The value of a record with this key: one of the value classes, None for a tombstone, and None for the
    types that are read and ignored (4, 16)."""
    if data is None or key.type in (PARTITION_METADATA, REGULAR_EXPRESSION):
        return None
    r = _Reader(data, flexible=True)
    version = r.i16()
    if version != VALUE_VERSION:
        raise RecordDecodeError(f"unknown version {version} of consumer group record type {key.type}")
    value: ConsumerRecordValue
    if key.type == GROUP_METADATA:
        epoch = r.i32()
        tags = _tagged_fields(r)
        hashed = tags.get(0)
        if hashed is not None and len(hashed) != 8:
            raise RecordDecodeError("metadata hash is not 8 bytes")
        r.end()
        return GroupMetadataValue(epoch, int.from_bytes(hashed, "big", signed=True) if hashed else 0)
    if key.type == MEMBER_METADATA:
        value = MemberMetadataValue(
            instance_id=r.string(nullable=True),
            rack_id=r.string(nullable=True),
            client_id=r.str_(),
            client_host=r.str_(),
            subscribed_topic_names=r.strings(),
            subscribed_topic_regex=r.string(nullable=True),
            rebalance_timeout_ms=r.i32(),
            server_assignor=r.string(nullable=True),
        )
        classic = _tagged_fields(r).get(0)
        r.end()
        if classic is not None:
            value = dataclasses.replace(value, classic=_classic_member_metadata(classic))
        return value
    elif key.type == TARGET_ASSIGNMENT_METADATA:
        value = TargetAssignmentMetadataValue(r.i32())
    elif key.type == TARGET_ASSIGNMENT_MEMBER:
        value = TargetAssignmentMemberValue(_read_topic_partitions(r))
    else:
        member_epoch = r.i32()
        previous = r.i32()
        state = int.from_bytes(r._take(1).tobytes(), "big", signed=True)
        assigned = _read_topic_partitions(r)
        pending = _read_topic_partitions(r)
        value = CurrentMemberAssignmentValue(member_epoch, previous, state, assigned, pending)
    r.skip_tagged_fields()
    r.end()
    return value
