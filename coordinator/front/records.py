"""Kafka record batches (magic 2, uncompressed) for the coordinator's own state topic: written by this server
(`encode_batch`, in a shard's transaction), read back when a shard is loaded (`decode_batches`, which also reads
batches compressed with gzip, as a cluster may rewrite them when it compacts, and leaves out the records of aborted
transactions as a read_committed consumer does)."""

from __future__ import annotations

import dataclasses
import gzip
import struct
from collections.abc import Iterable, Iterator, Sequence

from crc32c import crc32c

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_LOG_OVERHEAD = 12
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_ABORT_MARKER = 0  # a control record's key: >h version, >h type (0 abort, 1 commit)
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


@dataclasses.dataclass(frozen=True)
class Producer:
    """Who writes a batch: a transactional producer's id and epoch, and the sequence of the batch's first record."""

    producer_id: int
    epoch: int
    sequence: int


def encode_batch(
    entries: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int, producer: Producer | None = None
) -> bytes:
    """One uncompressed batch of `entries` (key, value or None for a tombstone), every record at
    `timestamp_ms`; with `producer`, a batch of that producer's open transaction."""
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
    pid, epoch, sequence, attributes = -1, -1, -1, 0
    if producer is not None:
        pid, epoch, sequence = producer.producer_id, producer.epoch, producer.sequence
        attributes = _TRANSACTIONAL
    header = _HEADER.pack(
        0, _HEADER.size - _LOG_OVERHEAD + len(records), -1, 2, 0, attributes, count - 1, timestamp_ms,
        timestamp_ms, pid, epoch, sequence, count,
    )  # fmt: skip
    batch = bytearray(header) + records
    struct.pack_into(">I", batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
    return bytes(batch)


class Aborted:
    """The aborted transactions a read_committed read must leave out, as Fetch answers list them (producer id,
    first offset), kept across the Fetches of one read: a transaction is left out from its first offset until its
    producer's abort marker."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, int]] = []  # (first offset, producer id), not reached yet
        self._open: set[int] = set()  # producer ids inside an aborted transaction at the read position

    def add(self, listed: Iterable[tuple[int, int]]) -> None:
        """(producer id, first offset) pairs of one Fetch answer."""
        known = set(self._pending)
        self._pending.extend((first, pid) for pid, first in listed if (first, pid) not in known)
        self._pending.sort(reverse=True)  # the smallest first offset last, to pop

    def skips(self, producer_id: int, last_offset: int) -> bool:
        """Whether the transactional batch of `producer_id` ending at `last_offset` was aborted."""
        self._reach(last_offset)
        return producer_id in self._open

    def marker(self, producer_id: int, offset: int, abort: bool) -> None:
        """A control batch: an abort marker ends its producer's aborted transaction."""
        self._reach(offset)  # as Kafka's consumer does: a transaction compacted down to its marker ends there
        if abort:
            self._open.discard(producer_id)

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[-1][0] <= offset:
            self._open.add(self._pending.pop()[1])


def batches_end(data: bytes | memoryview) -> int | None:
    """The offset after the last whole batch in `data` (None: not one whole batch)."""
    view = memoryview(data)
    pos, after = 0, None
    while pos + _HEADER.size <= len(view):
        base, length = struct.unpack_from(">qi", view, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > len(view):
            break
        after = base + struct.unpack_from(">i", view, pos + 23)[0] + 1  # lastOffsetDelta
        pos = end
    return after


def decode_batches(
    data: bytes | memoryview, aborted: Aborted | None = None
) -> Iterator[tuple[int, bytes, bytes | None, int]]:
    """(offset, key, value or None, timestamp) of every record of the whole batches in `data` (a Fetch answer's
    records: a partial batch at the end is left out); control batches are skipped, and with `aborted` so are the
    batches of aborted transactions."""
    view = memoryview(data)
    pos = 0
    while pos + _HEADER.size <= len(view):
        (base, length, _epoch, magic, crc, attributes, last, base_ts, _max_ts, pid, _pe, _seq, count) = (
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
            if aborted is not None and count:
                # one control record: length, attributes, timestamp and offset deltas, key length, key
                at = pos + _HEADER.size
                _, at = _read_varint(view, at)
                at += 1
                _, at = _read_varint(view, at)
                _, at = _read_varint(view, at)
                _, at = _read_varint(view, at)
                kind = struct.unpack_from(">hh", view, at)[1]
                aborted.marker(pid, base + last, kind == _ABORT_MARKER)
            pos = end
            continue
        if aborted is not None and attributes & _TRANSACTIONAL and aborted.skips(pid, base + last):
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
