"""Decoding of the consumer protocol's Subscription and Assignment (the bytes a "consumer" group's members and
leader exchange through JoinGroup and SyncGroup), with kio's generated entities. Every version of both is
prefixed by an int16 version and extends version 0, so version 0's reader decodes the fields needed here."""

from __future__ import annotations

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment as AssignmentV0
from kio.serial import entity_reader
from kio.serial.errors import DecodeError

from coordinator.group.group import parse_subscription_topics

_read_assignment_v0 = entity_reader(AssignmentV0)

__all__ = ["parse_assignment", "parse_subscription_topics"]


def parse_assignment(data: bytes) -> dict[str, list[int]] | None:
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
