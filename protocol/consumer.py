"""The consumer protocol: the Subscription and Assignment a "consumer" group's members and leader exchange
through JoinGroup and SyncGroup.

Subscription and the read-only view of an Assignment (`parse_subscription_topics`, `assignment_partitions`) use
kio's generated entities: every version of both is prefixed by an int16 version and extends version 0, so
version 0's reader decodes the fields needed there.

The Assignment that is filtered and re-encoded (what a SyncGroup answer carries for `protocolType` "consumer"):

Layout (apache/kafka clients/src/main/resources/common/message/ConsumerProtocolAssignment.json; versions 0-3
share one non-flexible layout, 1-3 exist only to signal what the client understands):

    int16 version
    [assigned_partitions]  int32 count, then per topic: string topic (int16 length), [int32 partition]
    bytes user_data        int32 length, -1 = null

A version above 3 is read with the v3 layout, as Kafka's ConsumerProtocol does; whatever follows the fields we
know is kept verbatim when the assignment is re-encoded, so a newer client's extra fields survive filtering.
Written here with `struct` rather than with kio's ConsumerProtocolAssignment entity because re-encoding must keep
the version, the byte layout of user data (null vs empty) and any unknown trailing bytes exactly.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment as AssignmentV0
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.serial import entity_reader
from kio.serial.errors import DecodeError

_read_subscription_v0 = entity_reader(SubscriptionV0)
_read_assignment_v0 = entity_reader(AssignmentV0)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class AssignmentDecodeError(ValueError):
    """Bytes that are not a consumer-protocol Assignment."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    version: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partitions), in the order sent
    user_data: bytes | None
    trailing: bytes = b""  # fields of a version newer than we know, kept verbatim


def decode_assignment(data: bytes) -> ConsumerAssignment:
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise AssignmentDecodeError(f"need {n} bytes at offset {pos}, have {len(data) - pos}")
        chunk = data[pos : pos + n]
        pos += n
        return bytes(chunk)

    version = _I16.unpack(take(2))[0]
    if version < 0:
        raise AssignmentDecodeError(f"negative assignment version {version}")
    count = _I32.unpack(take(4))[0]
    if count < 0 or count > len(data):
        raise AssignmentDecodeError(f"bad topic count {count}")
    topics = []
    for _ in range(count):
        length = _I16.unpack(take(2))[0]
        try:
            topic = take(length).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AssignmentDecodeError(f"topic name is not UTF-8: {exc}") from None
        n = _I32.unpack(take(4))[0]
        if n < 0 or 4 * n > len(data) - pos:
            raise AssignmentDecodeError(f"bad partition count {n}")
        partitions = struct.unpack(f">{n}i", take(4 * n))
        topics.append((topic, tuple(partitions)))
    user_length = _I32.unpack(take(4))[0]
    if user_length < -1:
        raise AssignmentDecodeError(f"bad user data length {user_length}")
    user_data = None if user_length == -1 else take(user_length)
    trailing = bytes(data[pos:])
    if trailing and version <= 3:
        raise AssignmentDecodeError(f"{len(trailing)} trailing bytes after a v{version} assignment")
    return ConsumerAssignment(version, tuple(topics), user_data, trailing)


def encode_assignment(assignment: ConsumerAssignment) -> bytes:
    out = bytearray(_I16.pack(assignment.version))
    out += _I32.pack(len(assignment.partitions))
    for topic, partitions in assignment.partitions:
        name = topic.encode("utf-8")
        out += _I16.pack(len(name)) + name
        out += _I32.pack(len(partitions)) + struct.pack(f">{len(partitions)}i", *partitions)
    if assignment.user_data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(assignment.user_data)) + assignment.user_data
    out += assignment.trailing
    return bytes(out)


def filter_assignment(data: bytes, withhold: Callable[[str], bool]) -> bytes:
    """The assignment without the topics for which `withhold(topic)` is true; version, user data and unknown
    trailing fields kept. Bytes that do not decode (or an empty assignment) are returned unchanged; bytes with
    nothing to withhold come back as the very same object."""
    if not data:
        return data
    try:
        assignment = decode_assignment(data)
    except AssignmentDecodeError:
        return data
    kept = tuple((topic, parts) for topic, parts in assignment.partitions if not withhold(topic))
    if len(kept) == len(assignment.partitions):
        return data
    return encode_assignment(dataclasses.replace(assignment, partitions=kept))


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a consumer-protocol Subscription (any version), or None if the bytes do not parse."""
    if len(metadata) < 2:
        return None
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        subscription, _ = _read_subscription_v0(metadata, 2)
    except (DecodeError, ValueError, OverflowError):
        return None
    return list(subscription.topics)


def assignment_partitions(data: bytes) -> dict[str, list[int]] | None:
    """topic -> sorted partitions of a consumer-protocol Assignment; {} for empty bytes (no assignment yet);
    None when the bytes are not a consumer Assignment."""
    if not data:
        return {}
    if len(data) < 2:
        return None
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        assignment, _ = _read_assignment_v0(bytes(data), 2)
    except (DecodeError, ValueError, OverflowError, KeyError):
        return None
    out: dict[str, list[int]] = {}
    for tp in assignment.assigned_partitions:
        out.setdefault(str(tp.topic), []).extend(int(p) for p in tp.partitions)
    return {topic: sorted(set(parts)) for topic, parts in out.items()}


__all__ = [
    "AssignmentDecodeError",
    "ConsumerAssignment",
    "assignment_partitions",
    "decode_assignment",
    "encode_assignment",
    "filter_assignment",
    "parse_subscription_topics",
]
