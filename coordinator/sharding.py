"""Which shard owns a group: Kafka's rule for the partition of __consumer_offsets that coordinates a group.

Kafka computes `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, with Java's String.hashCode over
UTF-16 code units in 32-bit arithmetic and an abs that maps Integer.MIN_VALUE to 0. Using the same rule means a
group lands on the same shard number here as on a Kafka cluster with the same partition count.
"""

from __future__ import annotations

import functools

_MASK = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """Java's String.hashCode() of `text`, as a signed 32-bit int."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def shard_of(group_id: str, num_shards: int) -> int:
    """The shard (partition of the offsets topic) that coordinates `group_id`."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_shards
