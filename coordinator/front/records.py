"""Kafka record batches (magic 2, uncompressed) for the coordinator's own state topic: written by this server
(`encode_batch`), read back when it starts (`decode_batches`, which also reads batches compressed with gzip, as a
cluster may rewrite them when it compacts)."""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator, Sequence

from crc32c import crc32c

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_LOG_OVERHEAD = 12
_CONTROL = 0x20
_COMPRESSION = 0x07
_GZIP = 1


def _varint(value: int, out: bytearray) -> None:
    value = (value << 1) ^ (value >> 63)  # zigzag
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def encode_batch(entries: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One uncompressed batch of `entries` (key, value or None for a tombstone), every record at
    `timestamp_ms`."""
    records = bytearray()
    for delta, (key, value) in enumerate(entries):
        body = bytearray(b"\x00")  # attributes
        _varint(0, body)  # timestamp delta
        _varint(delta, body)
        _varint(len(key), body)
        body += key
        if value is None:
            _varint(-1, body)
        else:
            _varint(len(value), body)
            body += value
        _varint(0, body)  # no headers
        _varint(len(body), records)
        records += body
    count = len(entries)
    header = _HEADER.pack(
        0, _HEADER.size - _LOG_OVERHEAD + len(records), -1, 2, 0, 0, count - 1, timestamp_ms, timestamp_ms,
        -1, -1, -1, count,
    )  # fmt: skip
    batch = bytearray(header) + records
    struct.pack_into(">I", batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
    return bytes(batch)


def decode_batches(data: bytes | memoryview) -> Iterator[tuple[int, bytes, bytes | None, int]]:
    """(offset, key, value or None, timestamp) of every record of the whole batches in `data` (a Fetch answer's
    records: a partial batch at the end is left out); control batches are skipped."""
    view = memoryview(data)
    pos = 0
    while pos + _HEADER.size <= len(view):
        (base, length, _epoch, magic, crc, attributes, _last, base_ts, _max_ts, _pid, _pe, _seq, count) = (
            _HEADER.unpack_from(view, pos)
        )
        end = pos + _LOG_OVERHEAD + length
        if end > len(view):
            return
        if magic != 2:
            raise ValueError(f"record batch of magic {magic} at offset {base}")
        if crc32c(view[pos + _ATTRIBUTES_AT : end]) != crc:
            raise ValueError(f"record batch at offset {base} fails its CRC")
        if attributes & _CONTROL:
            pos = end
            continue
        payload: bytes | memoryview = view[pos + _HEADER.size : end]
        if attributes & _COMPRESSION == _GZIP:
            payload = gzip.decompress(payload)
        elif attributes & _COMPRESSION:
            raise ValueError(f"record batch at offset {base} is compressed with codec {attributes & 7}")
        at = 0
        for _ in range(count):
            size, at = _read_varint(payload, at)
            record_end = at + size
            at += 1  # attributes
            ts_delta, at = _read_varint(payload, at)
            offset_delta, at = _read_varint(payload, at)
            key_len, at = _read_varint(payload, at)
            key = bytes(payload[at : at + key_len]) if key_len >= 0 else b""
            at += max(key_len, 0)
            value_len, at = _read_varint(payload, at)
            value = bytes(payload[at : at + value_len]) if value_len >= 0 else None
            at = record_end  # headers: none of ours
            yield base + offset_delta, key, value, base_ts + ts_delta
        pos = end
