"""The consumer protocol's Assignment (what a SyncGroup answer carries for `protocolType` "consumer").

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
        chunk = data[pos:pos + n]
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


__all__ = ["AssignmentDecodeError", "ConsumerAssignment", "decode_assignment", "encode_assignment",
           "filter_assignment"]
