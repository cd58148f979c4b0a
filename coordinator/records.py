"""The durable records of the coordinator, in the key/value layout of Kafka's `__consumer_offsets`.

A record is a key and a value, both bytes. The key starts with an int16 version that is also the record type,
then the key struct; the value starts with an int16 version, then the value struct; a null value is a
tombstone (the key is deleted when the log is compacted):

    key version 0 or 1  OffsetCommitKey   {group: string, topic: string, partition: int32}
                        OffsetCommitValue v0-v4 (we write v3; v1 when the commit has an expire timestamp)
    key version 2       GroupMetadataKey  {group: string}
                        GroupMetadataValue v0-v4 (we write v3: members carry their static instance id)

Field order and types follow apache/kafka's group-coordinator/src/main/resources/common/message/
{OffsetCommitKey,OffsetCommitValue,GroupMetadataKey,GroupMetadataValue}.json, so anyone who knows Kafka can
read our log, and a value written by Kafka (v0-v4, v4 being flexible with tagged fields) reads back here. Key
versions 3 and up are Kafka's KIP-848 and share-group records; they decode to `UnknownRecordType`, which a
loader may skip.

This coordinator's own records use key versions far above Kafka's (Kafka's are small consecutive numbers: 0-2
for classic groups, then KIP-848, share and streams groups counting up from 3), so they can never be mistaken
for one of Kafka's:

    key version 0x7F01  GroupPauseKey     {group: string}
                        GroupPauseValue v0 {group_paused: int8 (bool), topics: [string]}
                                        v1 {group_paused: int8 (bool), topics: [string], resumed_topics: [string]}
                        What the coordinator withholds from the group's consumer-protocol assignments: every
                        partition (group_paused) but those of resumed_topics, and those of the listed topics.
                        v1 only when resumed_topics is not empty. A tombstone = nothing paused.
    key version 0x7F02  GroupSettingsKey  {group: string}
                        GroupSettingsValue v0 {settings: [{name: string, value: int64}]}
                        Per-group values of this coordinator's own group settings (by their config names,
                        e.g. group.expansion.timeout.ms), overriding the server-wide ones. A tombstone = none.
    key version 0x7F03  GroupOfflineKey   {group: string}
                        GroupOfflineValue v0 {members: [{member_id: string, offline_since_ms: int64 (wall)}]}
                        The static members inside their registration window (group.static.registration.timeout.ms)
                        and since when, so that a restart keeps their places and their windows. A tombstone = none.

They live on their own keys rather than inside GroupMetadataValue, so they exist independently of the group
(a group can be paused before any member has joined it) and Kafka's own record layout stays untouched.

kio generates Kafka's request and response schemas but not these coordinator record schemas, so the codec is
hand-written with `struct`. Decoding never trusts its input: anything that is not a well-formed record of a
known version (short, overlong, a negative length, bad UTF-8, trailing bytes) raises `RecordDecodeError`,
nothing else. Loading a log decodes a record per committed offset, so OffsetCommit keys and values take a fast
path that falls back to the general decoder for anything it does not take (see "fast decoding" below).

Names are Kafka's in snake case, with the unit in the name where Kafka leaves it out (`rebalanceTimeout` ->
`rebalance_timeout_ms`, `commitTimestamp` -> `commit_timestamp_ms`).

Records of some types are applied to memory by the handler that writes them, before they are durable, and their
replay while serving is skipped (`applied_in_memory`). GroupMetadata, GroupPause, GroupSettings and GroupOffline
are barriers (`applied_in_memory_group`): requests of their group wait until the append settles. The consumer
group records (coordinator.consumer.records) are pipelined instead, as Kafka does: the group's next requests run
on top of them at once, and their answers wait for them in the log.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

__all__ = [
    "CoordinatorRecord",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupPauseKey",
    "GroupPauseValue",
    "GroupSettingsKey",
    "GroupSettingsValue",
    "GroupOfflineKey",
    "GroupOfflineValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordDecodeError",
    "UnknownRecordType",
    "applied_in_memory_group",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_value",
    "new_empty_group_metadata_record",
    "new_group_metadata_record",
    "new_group_metadata_tombstone",
    "new_offset_commit_record",
    "new_group_pause_record",
    "new_group_settings_record",
    "new_group_offline_record",
    "new_offset_commit_tombstone",
]

OFFSET_COMMIT_KEY_VERSION = 1  # Kafka writes 1; 0 is the same layout (from the ZooKeeper era)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = range(0, 5)
GROUP_METADATA_VALUE_VERSIONS = range(0, 5)
OFFSET_COMMIT_VALUE_WRITE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRE_VERSION = 1  # the only version with expireTimestamp
GROUP_METADATA_VALUE_WRITE_VERSION = 3
_FIRST_FLEXIBLE_VERSION = 4
GROUP_PAUSE_KEY_VERSION = 0x7F01  # ours (see the module doc)
GROUP_SETTINGS_KEY_VERSION = 0x7F02  # ours
GROUP_OFFLINE_KEY_VERSION = 0x7F03  # ours
OWN_VALUE_VERSION = 0  # the only version of GroupSettingsValue so far, and GroupPauseValue's first
GROUP_PAUSE_VALUE_VERSIONS = (0, 1)  # v1 adds resumed_topics


class RecordDecodeError(ValueError):
    """Bytes that are not a well-formed coordinator record key or value."""


class UnknownRecordType(RecordDecodeError):
    """A well-formed key prefix whose version (= record type) this coordinator does not know."""

    def __init__(self, version: int) -> None:
        super().__init__(f"unknown record type (key version) {version}")
        self.version = version


# -- the typed records ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1  # v3+
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1  # v1 only; -1 when absent


@dataclasses.dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None  # v3+
    client_id: str
    client_host: str
    rebalance_timeout_ms: int  # v1+; -1 when read from v0 (then the session timeout applies, as in Kafka)
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1  # v2+
    members: tuple[MemberMetadata, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPauseKey:
    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPauseValue:
    group_paused: bool
    topics: tuple[str, ...] = ()
    resumed_topics: tuple[str, ...] = ()  # exempt from group_paused


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSettingsKey:
    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSettingsValue:
    settings: tuple[tuple[str, int], ...] = ()  # (config name, value), sorted by name


@dataclasses.dataclass(frozen=True, slots=True)
class GroupOfflineKey:
    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class GroupOfflineValue:
    members: tuple[tuple[str, int], ...]  # (member id, offline since: wall-clock ms), by member id


RecordKey = OffsetCommitKey | GroupMetadataKey | GroupPauseKey | GroupSettingsKey | GroupOfflineKey
RecordValue = (
    OffsetCommitValue | GroupMetadataValue | GroupPauseValue | GroupSettingsValue | GroupOfflineValue
)


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One entry of the coordinator log: encoded key and value (None = tombstone)."""

    key: bytes
    value: bytes | None


def _setter_init(cls: type) -> None:
    """Replace the `__init__` of a frozen slots dataclass by one with the same parameters that stores each
    field through its slot descriptor.

    The generated `__init__` of a frozen dataclass calls `object.__setattr__` once per field, which makes
    building a record cost more than decoding it; loading a log builds millions (a CoordinatorRecord, a key
    and a value per entry). Fields with a default_factory are not supported (none of ours has one).
    """
    params = []
    body = []
    namespace: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        assert field.default_factory is dataclasses.MISSING and field.init, field
        name = field.name
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__
        if field.default is dataclasses.MISSING:
            params.append(name)
        else:
            namespace[f"_default_{name}"] = field.default
            params.append(f"{name}=_default_{name}")
        body.append(f"    _set_{name}(self, {name})\n")
    exec(f"def __init__(self, {', '.join(params)}) -> None:\n{''.join(body)}", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[misc]


for _cls in (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    GroupMetadataKey,
    MemberMetadata,
    GroupMetadataValue,
):
    _setter_init(_cls)
del _cls


# -- encoding ------------------------------------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Writer:
    def __init__(self, flexible: bool) -> None:
        self.buf = bytearray()
        self.flexible = flexible

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def string(self, v: str | None, nullable: bool = False) -> None:
        if v is None:
            if not nullable:
                raise ValueError("null in a non-nullable string field")
            if self.flexible:
                self.uvarint(0)
            else:
                self.i16(-1)
            return
        data = v.encode("utf-8")
        if self.flexible:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
            self.i16(len(data))
        self.buf += data

    def bytes_(self, v: bytes) -> None:
        if self.flexible:
            self.uvarint(len(v) + 1)
        else:
            self.i32(len(v))
        self.buf += v

    def array_length(self, n: int) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.i32(n)

    def tagged_fields(self) -> None:
        if self.flexible:
            self.uvarint(0)

    def strings(self, values: Iterable[str]) -> None:
        """[string], as this coordinator's own values write lists of names."""
        values = tuple(values)
        self.array_length(len(values))
        for v in values:
            self.string(v)

    def named_i64s(self, pairs: Iterable[tuple[str, int]]) -> None:
        """[{name: string, value: int64}]."""
        pairs = tuple(pairs)
        self.array_length(len(pairs))
        for name, value in pairs:
            self.string(name)
            self.i64(value)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordDecodeError(f"need {n} bytes at offset {self.pos}, have {len(self.data) - self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 28:
                raise RecordDecodeError("varint longer than 5 bytes")
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise RecordDecodeError(f"bad string length {n} at offset {self.pos}")
        try:
            return str(self._take(n).tobytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(f"string is not UTF-8: {exc}") from None

    def str_(self) -> str:
        value = self.string()
        assert value is not None
        return value

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise RecordDecodeError(f"bad bytes length {n} at offset {self.pos}")
        return self._take(n).tobytes()

    def array_length(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise RecordDecodeError(f"bad array length {n} at offset {self.pos}")
        if n > len(self.data) - self.pos:  # every element takes at least a byte: refuse absurd counts early
            raise RecordDecodeError(f"array of {n} elements cannot fit in {len(self.data) - self.pos} bytes")
        return n

    def strings(self) -> tuple[str, ...]:
        return tuple(self.str_() for _ in range(self.array_length()))

    def named_i64s(self) -> tuple[tuple[str, int], ...]:
        return tuple((self.str_(), self.i64()) for _ in range(self.array_length()))

    def skip_tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise RecordDecodeError(f"{len(self.data) - self.pos} trailing bytes")


def encode_key(key: RecordKey) -> bytes:
    w = _Writer(flexible=False)
    if isinstance(key, OffsetCommitKey):
        w.i16(OFFSET_COMMIT_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.i32(key.partition)
    elif isinstance(key, GroupMetadataKey):
        w.i16(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
    elif isinstance(key, GroupPauseKey):
        w.i16(GROUP_PAUSE_KEY_VERSION)
        w.string(key.group)
    elif isinstance(key, GroupSettingsKey):
        w.i16(GROUP_SETTINGS_KEY_VERSION)
        w.string(key.group)
    elif isinstance(key, GroupOfflineKey):
        w.i16(GROUP_OFFLINE_KEY_VERSION)
        w.string(key.group)
    else:
        raise TypeError(f"not a record key: {key!r}")
    return bytes(w.buf)


# -- fast decoding of the common records ---------------------------------------------------------------------
#
# Loading a log decodes one OffsetCommit record per committed offset, so these two take the common shapes
# (OffsetCommitKey v0/v1, OffsetCommitValue v0-v3, as `bytes`) with a few struct calls and no _Reader. They
# return None for anything they do not take, well-formed or not, and the general decoder below then decides:
# what they return is exactly what it would return, and every error still comes from it.

_KEY_HEAD = struct.Struct(">hh")  # key version, group length
_VALUE_V3 = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_VALUE_V3_NO_METADATA = struct.Struct(">hqihq")  # ... and the commit timestamp right after an empty metadata
_VALUE_V0_V2 = struct.Struct(">hqh")  # version, offset, metadata length
_new_object = object.__new__


def _setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    return tuple(cls.__dict__[name].__set__ for name in names)


_set_key_group, _set_key_topic, _set_key_partition = _setters(OffsetCommitKey, "group", "topic", "partition")
_set_offset, _set_leader_epoch, _set_metadata, _set_commit_timestamp, _set_expire_timestamp = _setters(
    OffsetCommitValue, "offset", "leader_epoch", "metadata", "commit_timestamp_ms", "expire_timestamp_ms"
)


# The last key decoded by _fast_offset_commit_key: its bytes up to the partition, their length, group and
# topic. A log holds runs of records of one group and topic (a commit writes one per partition), so most keys
# start with the same bytes as the one before: then only the partition is left to read. One tuple, replaced
# whole, so threads decoding at once never see a torn one.
_last_key_prefix: tuple[bytes, int, str, str] = (b"", -5, "", "")  # matches no key


def _fast_offset_commit_key(data: bytes) -> OffsetCommitKey | None:
    global _last_key_prefix
    n = len(data)
    prefix, end, group, topic = _last_key_prefix
    if n != end + 4 or not data.startswith(prefix):
        if n < 10:
            return None
        version, group_length = _KEY_HEAD.unpack_from(data)
        if not 0 <= version <= 1 or group_length < 0:
            return None
        group_end = 4 + group_length
        if group_end + 6 > n:
            return None
        end = group_end + 2 + _I16.unpack_from(data, group_end)[0]
        if end < group_end + 2 or end + 4 != n:
            return None
        try:
            group = data[4:group_end].decode()
            topic = data[group_end + 2 : end].decode()
        except UnicodeDecodeError:
            return None
        _last_key_prefix = (data[:end], end, group, topic)
    key = _new_object(OffsetCommitKey)  # = OffsetCommitKey(group, topic, partition), without the call
    _set_key_group(key, group)
    _set_key_topic(key, topic)
    _set_key_partition(key, _I32.unpack_from(data, end)[0])
    return key


def _fast_offset_commit_value(data: bytes) -> OffsetCommitValue | None:
    n = len(data)
    if n == 24:  # v3 without metadata: what we write for every commit of a client that sends none
        version, offset, leader_epoch, metadata_length, commit_timestamp_ms = (
            _VALUE_V3_NO_METADATA.unpack_from(data)
        )
        if version != 3 or metadata_length != 0:
            return None
        metadata = ""
        expire_timestamp_ms = -1
    else:
        if n < 20:
            return None
        version = _I16.unpack_from(data)[0]
        if version == 3:
            _, offset, leader_epoch, metadata_length = _VALUE_V3.unpack_from(data)
            start = 16
            end = n - 8
        elif 0 <= version <= 2:
            _, offset, metadata_length = _VALUE_V0_V2.unpack_from(data)
            leader_epoch = -1
            start = 12
            end = n - 16 if version == 1 else n - 8
        else:
            return None
        if metadata_length < 0 or start + metadata_length != end:
            return None
        try:
            metadata = data[start:end].decode()
        except UnicodeDecodeError:
            return None
        commit_timestamp_ms = _I64.unpack_from(data, end)[0]
        expire_timestamp_ms = _I64.unpack_from(data, end + 8)[0] if version == 1 else -1
    value = _new_object(OffsetCommitValue)  # = OffsetCommitValue(...), without the call
    _set_offset(value, offset)
    _set_leader_epoch(value, leader_epoch)
    _set_metadata(value, metadata)
    _set_commit_timestamp(value, commit_timestamp_ms)
    _set_expire_timestamp(value, expire_timestamp_ms)
    return value


# -- general decoding ----------------------------------------------------------------------------------------


def decode_key(data: bytes) -> RecordKey:
    if type(data) is bytes:
        key = _fast_offset_commit_key(data)
        if key is not None:
            return key
    return _decode_key(data)


def _decode_key(data: bytes) -> RecordKey:
    r = _Reader(data)
    version = r.i16()
    key: RecordKey
    if version in (0, 1):
        key = OffsetCommitKey(r.str_(), r.str_(), r.i32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.str_())
    elif version == GROUP_PAUSE_KEY_VERSION:
        key = GroupPauseKey(r.str_())
    elif version == GROUP_SETTINGS_KEY_VERSION:
        key = GroupSettingsKey(r.str_())
    elif version == GROUP_OFFLINE_KEY_VERSION:
        key = GroupOfflineKey(r.str_())
    elif version > GROUP_METADATA_KEY_VERSION:
        raise UnknownRecordType(version)
    else:
        raise RecordDecodeError(f"negative key version {version}")
    r.end()
    return key


def default_value_version(value: RecordValue) -> int:
    """The version Kafka writes for this value."""
    if isinstance(value, OffsetCommitValue):
        if value.expire_timestamp_ms != -1:
            return OFFSET_COMMIT_VALUE_WITH_EXPIRE_VERSION
        return OFFSET_COMMIT_VALUE_WRITE_VERSION
    if isinstance(value, GroupPauseValue):
        return 1 if value.resumed_topics else 0
    if isinstance(value, (GroupSettingsValue, GroupOfflineValue)):
        return OWN_VALUE_VERSION
    return GROUP_METADATA_VALUE_WRITE_VERSION


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """Encode a value with its version prefix; `version` defaults to the one Kafka writes (see module doc).
    Fields the chosen version lacks are left out."""
    if version is None:
        version = default_value_version(value)
    w = _Writer(flexible=version >= _FIRST_FLEXIBLE_VERSION)
    w.i16(version)
    if isinstance(value, OffsetCommitValue):
        if version not in OFFSET_COMMIT_VALUE_VERSIONS:
            raise ValueError(f"no OffsetCommitValue version {version}")
        w.i64(value.offset)
        if version >= 3:
            w.i32(value.leader_epoch)
        w.string(value.metadata)
        w.i64(value.commit_timestamp_ms)
        if version == 1:
            w.i64(value.expire_timestamp_ms)
        w.tagged_fields()
    elif isinstance(value, GroupMetadataValue):
        if version not in GROUP_METADATA_VALUE_VERSIONS:
            raise ValueError(f"no GroupMetadataValue version {version}")
        w.string(value.protocol_type)
        w.i32(value.generation)
        w.string(value.protocol, nullable=True)
        w.string(value.leader, nullable=True)
        if version >= 2:
            w.i64(value.current_state_timestamp_ms)
        w.array_length(len(value.members))
        for m in value.members:
            w.string(m.member_id)
            if version >= 3:
                w.string(m.group_instance_id, nullable=True)
            w.string(m.client_id)
            w.string(m.client_host)
            if version >= 1:
                w.i32(m.rebalance_timeout_ms)
            w.i32(m.session_timeout_ms)
            w.bytes_(m.subscription)
            w.bytes_(m.assignment)
            w.tagged_fields()
        w.tagged_fields()
    elif isinstance(value, GroupPauseValue):
        if version not in GROUP_PAUSE_VALUE_VERSIONS:
            raise ValueError(f"no GroupPauseValue version {version}")
        w.buf.append(1 if value.group_paused else 0)
        w.strings(value.topics)
        if version >= 1:
            w.strings(value.resumed_topics)
    elif isinstance(value, GroupSettingsValue):
        if version != OWN_VALUE_VERSION:
            raise ValueError(f"no GroupSettingsValue version {version}")
        w.named_i64s(value.settings)
    elif isinstance(value, GroupOfflineValue):
        if version != OWN_VALUE_VERSION:
            raise ValueError(f"no GroupOfflineValue version {version}")
        w.named_i64s(value.members)
    else:
        raise TypeError(f"not a record value: {value!r}")
    return bytes(w.buf)


def _decode_offset_commit_value(r: _Reader, version: int) -> OffsetCommitValue:
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.str_()
    commit_timestamp_ms = r.i64()
    expire_timestamp_ms = r.i64() if version == 1 else -1
    r.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms)


def _decode_group_metadata_value(r: _Reader, version: int) -> GroupMetadataValue:
    protocol_type = r.str_()
    generation = r.i32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    current_state_timestamp_ms = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.str_()
        group_instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.str_()
        client_host = r.str_()
        rebalance_timeout_ms = r.i32() if version >= 1 else -1
        session_timeout_ms = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            )
        )
    r.skip_tagged_fields()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp_ms, tuple(members)
    )


def decode_value(key: RecordKey, data: bytes | None) -> RecordValue | None:
    """Decode the value of a record whose key is `key`; None (a tombstone) stays None."""
    if data is None:
        return None
    if type(data) is bytes and type(key) is OffsetCommitKey:
        value = _fast_offset_commit_value(data)
        if value is not None:
            return value
    return _decode_value(key, data)


def _decode_value(key: RecordKey, data: bytes) -> RecordValue:
    r = _Reader(data)
    version = r.i16()
    r.flexible = version >= _FIRST_FLEXIBLE_VERSION
    value: RecordValue
    if isinstance(key, OffsetCommitKey):
        if version not in OFFSET_COMMIT_VALUE_VERSIONS:
            raise RecordDecodeError(f"unknown OffsetCommitValue version {version}")
        value = _decode_offset_commit_value(r, version)
    elif isinstance(key, GroupMetadataKey):
        if version not in GROUP_METADATA_VALUE_VERSIONS:
            raise RecordDecodeError(f"unknown GroupMetadataValue version {version}")
        value = _decode_group_metadata_value(r, version)
    elif isinstance(key, GroupPauseKey):
        if version not in GROUP_PAUSE_VALUE_VERSIONS:
            raise RecordDecodeError(f"unknown GroupPauseValue version {version}")
        flag = r._take(1)[0]
        if flag not in (0, 1):
            raise RecordDecodeError(f"bad boolean {flag}")
        topics = r.strings()
        value = GroupPauseValue(bool(flag), topics, r.strings() if version >= 1 else ())
    elif isinstance(key, GroupSettingsKey):
        if version != OWN_VALUE_VERSION:
            raise RecordDecodeError(f"unknown GroupSettingsValue version {version}")
        value = GroupSettingsValue(r.named_i64s())
    elif isinstance(key, GroupOfflineKey):
        if version != OWN_VALUE_VERSION:
            raise RecordDecodeError(f"unknown GroupOfflineValue version {version}")
        value = GroupOfflineValue(r.named_i64s())
    else:
        raise TypeError(f"not a record key: {key!r}")
    r.end()
    return value


def _simple_offset_commit(key: bytes, value: bytes) -> tuple[str, str, int, int, int, int] | None:
    """(group, topic, partition, offset, leader epoch, commit timestamp) of an OffsetCommit record whose value is
    v3 without metadata (what this coordinator writes for a client that sends none: nearly every record of a
    big log), read without building key and value objects; None for any other record (use decode_record).
    Loading a log calls this once per entry."""
    if len(value) != 24:
        return None
    version, offset, leader_epoch, metadata_length, commit_timestamp_ms = _VALUE_V3_NO_METADATA.unpack_from(
        value
    )
    if version != 3 or metadata_length != 0:
        return None
    prefix, end, group, topic = _last_key_prefix
    if len(key) == end + 4 and key.startswith(prefix):
        return group, topic, _I32.unpack_from(key, end)[0], offset, leader_epoch, commit_timestamp_ms
    decoded = _fast_offset_commit_key(key)
    if decoded is None:
        return None
    return decoded.group, decoded.topic, decoded.partition, offset, leader_epoch, commit_timestamp_ms


try:  # the same function compiled (coordinator/_speedups.c); optional, built where the install had a C compiler
    from coordinator._speedups import simple_offset_commit as _compiled_simple_offset_commit
except ImportError:  # pragma: no cover
    _compiled_simple_offset_commit = None  # type: ignore[assignment]

simple_offset_commit: Callable[[bytes, bytes], tuple[str, str, int, int, int, int] | None] = (
    _compiled_simple_offset_commit if _compiled_simple_offset_commit is not None else _simple_offset_commit
)


def decode_record(record: CoordinatorRecord) -> tuple[RecordKey, RecordValue | None]:
    """decode_key and decode_value of a record. Loading a log calls this once per entry, so the fast paths
    are taken here directly, the most common case of _fast_offset_commit_key (a key that continues the run of
    the last one) inline."""
    data = record.key
    key: RecordKey | None = None
    if type(data) is bytes:
        prefix, end, group, topic = _last_key_prefix
        if len(data) == end + 4 and data.startswith(prefix):
            key = _new_object(OffsetCommitKey)
            _set_key_group(key, group)
            _set_key_topic(key, topic)
            _set_key_partition(key, _I32.unpack_from(data, end)[0])
        else:
            key = _fast_offset_commit_key(data)
    if key is None:
        key = _decode_key(data)
    value_data = record.value
    if value_data is None:
        return key, None
    if type(value_data) is bytes and type(key) is OffsetCommitKey:
        value = _fast_offset_commit_value(value_data)
        if value is not None:
            return key, value
    return key, _decode_value(key, value_data)


# -- helpers that build records (Kafka's GroupCoordinatorRecordHelpers) --------------------------------------


def new_offset_commit_record(
    group_id: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    leader_epoch: int = -1,
    metadata: str = "",
    commit_timestamp_ms: int,
    expire_timestamp_ms: int = -1,
) -> CoordinatorRecord:
    if expire_timestamp_ms == -1:  # every commit but a v1-v4 one with a retention time: what encode_* write
        key = _commit_keys.get((group_id, topic, partition))
        if key is None:
            g, t = group_id.encode("utf-8"), topic.encode("utf-8")
            if len(g) <= 0x7FFF and len(t) <= 0x7FFF:
                key = b"".join(
                    (_COMMIT_KEY_VERSION, _I16.pack(len(g)), g, _I16.pack(len(t)), t, _I32.pack(partition))
                )
                if len(_commit_keys) >= _COMMIT_KEYS:
                    _commit_keys.clear()
                _commit_keys[(group_id, topic, partition)] = key
        if key is not None:
            if not metadata:
                return CoordinatorRecord(
                    key,
                    _COMMIT_VALUE.pack(
                        OFFSET_COMMIT_VALUE_WRITE_VERSION, offset, leader_epoch, 0, commit_timestamp_ms
                    ),
                )
            m = metadata.encode("utf-8")
            if len(m) <= 0x7FFF:
                return CoordinatorRecord(
                    key,
                    b"".join(
                        (
                            _COMMIT_VALUE_HEAD.pack(
                                OFFSET_COMMIT_VALUE_WRITE_VERSION, offset, leader_epoch, len(m)
                            ),
                            m,
                            _I64.pack(commit_timestamp_ms),
                        )
                    ),
                )
    value = OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms)
    return CoordinatorRecord(encode_key(OffsetCommitKey(group_id, topic, partition)), encode_value(value))


# The fast path of new_offset_commit_record: a key of version 1 and a value of version 3 (offset, leader epoch,
# metadata, commit timestamp), as encode_key and encode_value write them, without a _Writer per record.
_COMMIT_KEY_VERSION = _I16.pack(OFFSET_COMMIT_KEY_VERSION)
_COMMIT_VALUE_HEAD = struct.Struct(">hqih")
_COMMIT_VALUE = struct.Struct(">hqihq")  # the same without metadata: the head, then the commit timestamp
# (group, topic, partition) -> the key of its commits: a consumer commits the same partitions again and again
_commit_keys: dict[tuple[str, str, int], bytes] = {}
_COMMIT_KEYS = 16384


def new_offset_commit_tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(encode_key(OffsetCommitKey(group_id, topic, partition)), None)


class MemberLike(Protocol):
    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...
    @property
    def rebalance_timeout_ms(self) -> int: ...
    @property
    def session_timeout_ms(self) -> int: ...
    def metadata(self, protocol_name: str) -> bytes: ...


class GroupLike(Protocol):
    @property
    def group_id(self) -> str: ...
    @property
    def protocol_type(self) -> str | None: ...
    @property
    def generation_id(self) -> int: ...
    @property
    def protocol_name(self) -> str | None: ...
    @property
    def leader_id(self) -> str | None: ...
    @property
    def current_state_timestamp_ms(self) -> int: ...
    def all_members(self) -> Iterable[MemberLike]: ...


def group_metadata_value(group: GroupLike, assignments: Mapping[str, bytes]) -> GroupMetadataValue:
    """The GroupMetadataValue of a classic group with the given assignment of every member."""
    members = []
    for member in group.all_members():
        if group.protocol_name is None:
            raise ValueError(f"group {group.group_id} has members but no selected protocol")
        assignment = assignments.get(member.member_id)
        if assignment is None:
            raise ValueError(f"member {member.member_id} of group {group.group_id} has no assignment")
        members.append(
            MemberMetadata(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.session_timeout_ms,
                subscription=member.metadata(group.protocol_name),
                assignment=assignment,
            )
        )
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp_ms=group.current_state_timestamp_ms,
        members=tuple(members),
    )


def new_group_metadata_record(group: GroupLike, assignments: Mapping[str, bytes]) -> CoordinatorRecord:
    """The GroupMetadata record of a classic group: its durable part, with `assignments` for its members."""
    return CoordinatorRecord(
        encode_key(GroupMetadataKey(group.group_id)), encode_value(group_metadata_value(group, assignments))
    )


def new_empty_group_metadata_record(group_id: str, current_state_timestamp_ms: int) -> CoordinatorRecord:
    """The record that creates a classic group (generation 0, no protocol, no members)."""
    value = GroupMetadataValue("", 0, None, None, current_state_timestamp_ms, ())
    return CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), encode_value(value))


def new_group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), None)


def new_group_pause_record(
    group_id: str, group_paused: bool, topics: Iterable[str], resumed_topics: Iterable[str] = ()
) -> CoordinatorRecord:
    """The pause state of a group; nothing paused is a tombstone. `resumed_topics` (exempt from a whole-group
    pause) only count while the group is paused."""
    key = encode_key(GroupPauseKey(group_id))
    topics = tuple(sorted(set(topics)))
    resumed = tuple(sorted(set(resumed_topics))) if group_paused else ()
    if not group_paused and not topics:
        return CoordinatorRecord(key, None)
    return CoordinatorRecord(key, encode_value(GroupPauseValue(group_paused, topics, resumed)))


def new_group_settings_record(group_id: str, settings: Mapping[str, int]) -> CoordinatorRecord:
    """The per-group settings of a group; no settings is a tombstone."""
    key = encode_key(GroupSettingsKey(group_id))
    if not settings:
        return CoordinatorRecord(key, None)
    return CoordinatorRecord(key, encode_value(GroupSettingsValue(tuple(sorted(settings.items())))))


def new_group_offline_record(group_id: str, offline_since_ms: Mapping[str, int]) -> CoordinatorRecord:
    """The static members of a group inside their registration window, with since when (wall-clock ms); none
    is a tombstone."""
    key = encode_key(GroupOfflineKey(group_id))
    if not offline_since_ms:
        return CoordinatorRecord(key, None)
    return CoordinatorRecord(key, encode_value(GroupOfflineValue(tuple(sorted(offline_since_ms.items())))))


_GROUP_METADATA_PREFIX = GROUP_METADATA_KEY_VERSION.to_bytes(2, "big")
_APPLIED_IN_MEMORY_PREFIXES = frozenset(
    {
        _GROUP_METADATA_PREFIX,
        GROUP_PAUSE_KEY_VERSION.to_bytes(2, "big"),
        GROUP_SETTINGS_KEY_VERSION.to_bytes(2, "big"),
        GROUP_OFFLINE_KEY_VERSION.to_bytes(2, "big"),
    }
)
# Kafka's consumer group records (KIP-848, coordinator.consumer.records: types 3, 5, 6, 7, 8) are applied in memory
# too, but pipelined as Kafka does, not barriers: the next heartbeat of the group runs on top of them at once
# (its answer waits for them in the log), and a failed append is undone by the consumer group manager.
_PIPELINED_PREFIXES = frozenset(kind.to_bytes(2, "big") for kind in (3, 5, 6, 7, 8))
_OFFSET_COMMIT_PREFIXES = frozenset(v.to_bytes(2, "big") for v in (0, OFFSET_COMMIT_KEY_VERSION))


def applied_in_memory(record: CoordinatorRecord) -> bool:
    """Whether the state machine applied the record in memory when it wrote it (so its replay is skipped): the
    barrier records of `applied_in_memory_group` and the pipelined consumer group records."""
    prefix = record.key[:2]
    return prefix in _APPLIED_IN_MEMORY_PREFIXES or prefix in _PIPELINED_PREFIXES


def applied_in_memory_group(record: CoordinatorRecord) -> str | None:
    """The group of a barrier record, one the state machine applies in memory before it is durable and nothing
    may be computed on top of until it is (GroupMetadata, GroupPause, GroupSettings, GroupOffline: each key is a
    version and the group id), else None."""
    key = record.key
    if key[:2] not in _APPLIED_IN_MEMORY_PREFIXES:
        return None
    return key[4 : 4 + int.from_bytes(key[2:4], "big")].decode("utf-8", "replace")


def is_group_metadata(record: CoordinatorRecord) -> bool:
    return record.key[:2] == _GROUP_METADATA_PREFIX


def count_offset_records(records: Iterable[CoordinatorRecord]) -> int:
    """How many of `records` are offset commits or their tombstones."""
    return sum(1 for r in records if r.key[:2] in _OFFSET_COMMIT_PREFIXES)
