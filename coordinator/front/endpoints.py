"""KIP-951 NodeEndpoints in forwarded Produce (v10+) and Fetch (v16+) answers: when a partition's leader moved,
the broker names the new leader's host and port in a tagged field at the end of the answer, and a client
re-points that node to it. Passed on as they are, those would be the brokers' own addresses, and the client would
go around this server. So the answer is walked (without copying or decoding the records) to its top-level tagged
fields; when there are any, it is decoded, the addresses are rewritten to this server's, and it is encoded again.
Almost every answer has none and goes on as the broker's bytes.

The same walking reads a raw Produce request's acks (`produce_acks`): with acks=0 no answer comes back, and the
DescribeTransactions answers of the state topic's lease checks (`transaction_states`), which kio refuses."""

from __future__ import annotations

import struct

from protocol.api_keys import ApiKey

# The newest versions whose layout `top_level_tags` knows (and kio decodes).
NEWEST: dict[int, int] = {ApiKey.PRODUCE: 13, ApiKey.FETCH: 18}
FIRST_WITH_ENDPOINTS: dict[int, int] = {ApiKey.PRODUCE: 10, ApiKey.FETCH: 16}


_I16 = struct.Struct(">h")


def _uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip_tags(data: bytes | memoryview, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def _skip_compact(data: bytes | memoryview, pos: int) -> int:
    """A compact (nullable) string or bytes."""
    length, pos = _uvarint(data, pos)
    return pos + max(length - 1, 0)


def _produce(data: bytes | memoryview, pos: int, version: int) -> int:
    topics, pos = _uvarint(data, pos)
    for _ in range(max(topics - 1, 0)):
        pos = pos + 16 if version >= 13 else _skip_compact(data, pos)  # topic id, or name
        partitions, pos = _uvarint(data, pos)
        for _ in range(max(partitions - 1, 0)):
            pos += 4 + 2 + 8 + 8 + 8  # index, error, base offset, log append time, log start offset
            errors, pos = _uvarint(data, pos)
            for _ in range(max(errors - 1, 0)):
                pos = _skip_tags(data, _skip_compact(data, pos + 4))
            pos = _skip_tags(data, _skip_compact(data, pos))  # error message, then the partition's tags
        pos = _skip_tags(data, pos)
    return pos + 4  # throttle time


def _fetch(data: bytes | memoryview, pos: int, version: int) -> int:
    pos += 4 + 2 + 4  # throttle time, error, session id
    topics, pos = _uvarint(data, pos)
    for _ in range(max(topics - 1, 0)):
        pos += 16  # topic id
        partitions, pos = _uvarint(data, pos)
        for _ in range(max(partitions - 1, 0)):
            pos += 4 + 2 + 8 + 8 + 8  # index, error, high watermark, last stable offset, log start offset
            aborted, pos = _uvarint(data, pos)
            for _ in range(max(aborted - 1, 0)):
                pos = _skip_tags(data, pos + 16)
            pos += 4  # preferred read replica
            pos = _skip_tags(data, _skip_compact(data, pos))  # records, then the partition's tags
        pos = _skip_tags(data, pos)
    return pos


def has_endpoints(api_key: int, version: int, answer: bytes | memoryview) -> bool:
    """Whether a Produce or Fetch answer (from after its correlation id) has top-level tagged fields: its
    NodeEndpoints (the only one these versions define). ValueError/IndexError when it does not parse."""
    if version < FIRST_WITH_ENDPOINTS[api_key]:
        return False
    pos = _skip_tags(answer, 0)  # the response header's
    walk = _produce if api_key == ApiKey.PRODUCE else _fetch
    pos = walk(answer, pos, version)
    count, _ = _uvarint(answer, pos)
    return count > 0


def produce_acks(frame: bytes | memoryview, version: int) -> int:
    """The acks of a Produce request frame (v3+: after the header and the transactional id)."""
    offset = 8  # api key, version, correlation id
    (client_len,) = _I16.unpack_from(frame, offset)
    offset += 2 + max(client_len, 0)
    if version >= 9:  # flexible: the header's tagged fields, then a compact nullable string
        offset = _skip_compact(frame, _skip_tags(frame, offset))
    else:
        (length,) = _I16.unpack_from(frame, offset)
        offset += 2 + max(length, 0)
    (acks,) = _I16.unpack_from(frame, offset)
    return int(acks)


def transaction_states(payload: bytes | memoryview) -> dict[str, tuple[int, int, int]]:
    """A DescribeTransactions v0 answer (from after the correlation id): transactional id -> (error code,
    producer id, epoch). Read here rather than by kio, which refuses the answer's start time of -1 (no transaction
    open), the usual case for a shard's idle writer (coordinator.front.state)."""
    pos = 1 + 4  # the header's empty tagged fields; throttle_time_ms
    states, pos = _uvarint(payload, pos)
    out: dict[str, tuple[int, int, int]] = {}
    for _ in range(max(states - 1, 0)):
        (code,) = _I16.unpack_from(payload, pos)
        length, pos = _uvarint(payload, pos + 2)
        tid = bytes(payload[pos : pos + length - 1]).decode()
        pos = _skip_compact(payload, pos + length - 1) + 4 + 8  # the state's name; timeout, start time
        producer_id, epoch = struct.unpack_from(">qh", payload, pos)
        topics, pos = _uvarint(payload, pos + 10)
        for _ in range(max(topics - 1, 0)):
            partitions, pos = _uvarint(payload, _skip_compact(payload, pos))
            pos = _skip_tags(payload, pos + 4 * max(partitions - 1, 0))
        pos = _skip_tags(payload, pos)
        out[tid] = (code, producer_id, epoch)
    return out
