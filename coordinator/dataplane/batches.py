"""RecordBatch v2 (magic 2) validation for Produce, and the read-side helpers the partition log needs.

A producer sends each partition's data as the raw bytes of one or more record batches. The embedded data plane
stores those bytes as they came (only the 8-byte baseOffset is rewritten when offsets are assigned) and serves
them back to consumers byte for byte, so anything accepted here is what every consumer will have to parse.
Validation therefore checks every byte it can reach instead of trusting the header:

* framing: at least the 61-byte header, a batchLength that fits the bytes present and is large enough to hold
  the header, no trailing partial batch;
* magic 2, and a CRC-32C over attributes..end equal to the header's crc (the CRC excludes baseOffset,
  batchLength, partitionLeaderEpoch and magic, which is why rewriting baseOffset keeps a batch valid);
* the records themselves for uncompressed and gzip batches: each record's varint length must match the fields
  inside it, there must be exactly `recordsCount` records and nothing after the last one, and offset deltas
  must run 0, 1, 2, ...;
* the rules Kafka applies to batches coming from clients: baseOffset 0, a positive count with lastOffsetDelta
  == count - 1, no control batches, idempotent batches carry a sequence number;
* the size limit `message.max.bytes`, measured on the whole batch (12-byte log overhead included) as Kafka
  does.

Batches compressed with snappy, lz4 or zstd are validated down to the CRC and header only: decoding them needs
codecs this project does not depend on, and the CRC already guarantees the compressed payload is exactly what
the producer wrote. For those batches the partition log also finds offsets by timestamp at batch granularity.

Error codes follow Kafka's split: CORRUPT_MESSAGE when the bytes do not form a well-formed batch,
INVALID_RECORD when a well-formed batch breaks a rule for client writes, MESSAGE_TOO_LARGE above the size
limit.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import zlib
from collections.abc import Iterator

from crc32c import crc32c
from kio.serial.errors import DecodeError
from kio.serial.readers import read_signed_varint, read_signed_varlong

from protocol.errors import ErrorCode

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
CRC_OFFSET = 17  # the crc field follows baseOffset, batchLength, partitionLeaderEpoch and magic
ATTRIBUTES_OFFSET = 21  # the CRC covers everything from here to the end of the batch
MAGIC_OFFSET = 16
MAGIC = 2
NO_TIMESTAMP = -1
_BASE_OFFSET = struct.Struct(">q")

# A gzip batch is decompressed to check its records; this bounds the memory one batch may claim.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class InvalidBatch(Exception):
    """A batch that must be rejected, with the Kafka error code to answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _corrupt(message: str) -> InvalidBatch:
    return InvalidBatch(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> InvalidBatch:
    return InvalidBatch(ErrorCode.invalid_record, message)


@dataclasses.dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """The whole batch in bytes, log overhead included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & _TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def read_header(data: bytes | memoryview, offset: int = 0) -> BatchHeader:
    """Unpack a batch header without checking it (the caller knows at least 61 bytes are there)."""
    return BatchHeader(*HEADER.unpack_from(data, offset))


@dataclasses.dataclass(frozen=True, slots=True)
class ValidBatch:
    """One validated batch: its bytes (exactly `header.size` of them) and facts the partition log indexes."""

    data: bytes
    header: BatchHeader
    max_timestamp: int  # from the records when they could be read, else the header's maxTimestamp


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The same batch with baseOffset replaced; the CRC stays valid because it does not cover baseOffset."""
    return _BASE_OFFSET.pack(base_offset) + batch[8:]


def validate_batches(
    data: bytes | memoryview | None,
    *,
    max_batch_bytes: int,
    allow_zstd: bool = True,
) -> list[ValidBatch]:
    """Split a partition's produce data into validated batches, or raise InvalidBatch for the first bad one.

    `max_batch_bytes` is `message.max.bytes`. `allow_zstd` is False for Produce before v7, which predates
    zstd.
    """
    if not data:
        raise _invalid("produce data for a partition must hold at least one record batch")
    view = memoryview(data)
    total = len(view)
    batches: list[ValidBatch] = []
    position = 0
    while position < total:
        remaining = total - position
        if remaining < HEADER_SIZE:
            raise _corrupt(f"{remaining} bytes at position {position} are too few for a record batch header")
        magic = view[position + MAGIC_OFFSET]
        if magic != MAGIC:
            raise _corrupt(f"record batch magic is {magic}; only magic {MAGIC} is accepted")
        header = read_header(view, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise _corrupt(f"batchLength {header.batch_length} is smaller than the record batch header")
        if header.size > max_batch_bytes:
            raise InvalidBatch(
                ErrorCode.message_too_large,
                f"the record batch is {header.size} bytes, above message.max.bytes={max_batch_bytes}",
            )
        if header.size > remaining:
            raise _corrupt(
                f"batchLength {header.batch_length} runs past the end of the data ({remaining} bytes left)"
            )
        batch_view = view[position : position + header.size]
        batches.append(_validate_one(batch_view, header, allow_zstd))
        position += header.size
    return batches


def _validate_one(batch: memoryview, header: BatchHeader, allow_zstd: bool) -> ValidBatch:
    actual_crc = crc32c(batch[ATTRIBUTES_OFFSET:])
    if actual_crc != header.crc:
        raise _corrupt(f"record batch CRC {actual_crc:#010x} does not match the header's {header.crc:#010x}")
    codec = header.compression
    if codec > Compression.ZSTD:
        raise _corrupt(f"unknown compression codec {codec}")
    if codec == Compression.ZSTD and not allow_zstd:
        raise InvalidBatch(
            ErrorCode.unsupported_compression_type, "zstd-compressed batches need Produce version 7 or later"
        )

    max_timestamp = header.max_timestamp
    records = _records_payload(batch, header)
    if records is not None:
        record_max = _check_records(records, header)
        if not header.log_append_time:
            max_timestamp = record_max

    # Rules for batches written by clients (Kafka's LogValidator applies the same ones).
    if header.base_offset != 0:
        raise _invalid(f"a produced record batch must have baseOffset 0, not {header.base_offset}")
    if header.records_count <= 0:
        raise _invalid(f"a record batch must hold at least one record (recordsCount={header.records_count})")
    if header.last_offset_delta != header.records_count - 1:
        raise _invalid(
            f"lastOffsetDelta {header.last_offset_delta} does not match recordsCount {header.records_count}"
        )
    if header.is_control:
        raise _invalid("clients may not write control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise _invalid(f"idempotent batch of producer {header.producer_id} has no sequence number")
    return ValidBatch(data=bytes(batch), header=header, max_timestamp=max_timestamp)


def _records_payload(batch: memoryview, header: BatchHeader) -> memoryview | None:
    """The uncompressed records section, or None when the codec cannot be decoded here."""
    payload = batch[HEADER_SIZE:]
    codec = header.compression
    if codec == Compression.NONE:
        return payload
    if codec == Compression.GZIP:
        return memoryview(_gunzip(payload))
    return None


def _gunzip(payload: memoryview) -> bytes:
    """Decompress a gzip stream (possibly several concatenated members, as Java's GZIPInputStream accepts)."""
    out = bytearray()
    data = bytes(payload)
    if not data:
        raise _corrupt("gzip batch has an empty payload")
    while data:
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += decoder.decompress(data, MAX_DECOMPRESSED_BYTES + 1 - len(out))
        except zlib.error as exc:
            raise _corrupt(f"gzip payload cannot be decompressed: {exc}") from None
        if len(out) > MAX_DECOMPRESSED_BYTES or decoder.unconsumed_tail:
            raise _corrupt(f"gzip payload decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes")
        if not decoder.eof:
            raise _corrupt("gzip payload is truncated")
        data = decoder.unused_data
    return bytes(out)


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (int32) at `pos` that must end at or before `end`; returns (value, new position)."""
    try:
        value, size = read_signed_varint(buf, pos)
    except (DecodeError, ValueError):
        raise _corrupt(f"malformed varint at record byte {pos}") from None
    pos += size
    if pos > end or not -(2**31) <= value < 2**31:
        raise _corrupt(f"malformed varint at record byte {pos - size}")
    return value, pos


def _varlong(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    try:
        value, size = read_signed_varlong(buf, pos)
    except (DecodeError, ValueError):
        raise _corrupt(f"malformed varlong at record byte {pos}") from None
    pos += size
    if pos > end:
        raise _corrupt(f"malformed varlong at record byte {pos - size}")
    return value, pos


def _skip_bytes(buf: memoryview, pos: int, end: int, nullable: bool, what: str) -> int:
    length, pos = _varint(buf, pos, end)
    if length < -1 or (length == -1 and not nullable):
        raise _corrupt(f"invalid {what} length {length}")
    if length > 0:
        pos += length
        if pos > end:
            raise _corrupt(f"{what} runs past the end of its record")
    return pos


def iter_records(
    records: memoryview,
    base_timestamp: int,
    log_append_time: bool = False,
    batch_max_timestamp: int = NO_TIMESTAMP,
) -> Iterator[tuple[int, int]]:
    """Walk a records section, checking every length; yields (offsetDelta, timestamp) per record.

    Raises InvalidBatch (CORRUPT_MESSAGE) on the first malformed byte. Under LogAppendTime every record's
    timestamp is the batch's maxTimestamp, as Kafka defines it.
    """
    end = len(records)
    pos = 0
    while pos < end:
        length, pos = _varint(records, pos, end)
        record_end = pos + length
        if length < 1 or record_end > end:  # the attributes byte alone makes a record at least 1 byte long
            raise _corrupt(f"record length {length} at byte {pos} does not fit the batch")
        pos += 1  # attributes: unused in magic 2
        timestamp_delta, pos = _varlong(records, pos, record_end)
        offset_delta, pos = _varint(records, pos, record_end)
        pos = _skip_bytes(records, pos, record_end, True, "key")
        pos = _skip_bytes(records, pos, record_end, True, "value")
        header_count, pos = _varint(records, pos, record_end)
        if header_count < 0:
            raise _corrupt(f"negative record header count {header_count}")
        for _ in range(header_count):
            pos = _skip_bytes(records, pos, record_end, False, "header key")
            pos = _skip_bytes(records, pos, record_end, True, "header value")
        if pos != record_end:
            raise _corrupt(f"record declares {length} bytes but its fields take {length + pos - record_end}")
        timestamp = batch_max_timestamp if log_append_time else base_timestamp + timestamp_delta
        yield offset_delta, timestamp


def _check_records(records: memoryview, header: BatchHeader) -> int:
    """Check the records section against the header; returns the largest record timestamp."""
    count = 0
    max_timestamp = NO_TIMESTAMP
    for offset_delta, timestamp in iter_records(records, header.base_timestamp):
        if count >= header.records_count:
            raise _corrupt(f"the batch holds more records than its recordsCount {header.records_count}")
        if offset_delta != count:
            raise _invalid(f"record {count} has offset delta {offset_delta}; deltas must be 0, 1, 2, ...")
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        count += 1
    if count != header.records_count:
        raise _corrupt(f"the batch holds {count} records but recordsCount says {header.records_count}")
    return max_timestamp


def record_timestamps(batch: bytes | memoryview) -> list[tuple[int, int]] | None:
    """(offset, timestamp) of every record of a stored (already validated) batch, in order; None when the
    batch's codec cannot be decoded here."""
    view = memoryview(batch)
    header = read_header(view)
    records = _records_payload(view, header)
    if records is None:
        return None
    return [
        (header.base_offset + delta, timestamp)
        for delta, timestamp in iter_records(
            records, header.base_timestamp, header.log_append_time, header.max_timestamp
        )
    ]
