"""RecordBatch v2 validation: real batches from kio's writer, then every way of breaking them we can name.

Some tests build batches by hand (`raw_batch`, `encode_record`) so a header field or a record can be made
wrong while the CRC stays right; that is the only way to reach the checks behind the CRC.
"""

from __future__ import annotations

import datetime
import gzip
import io
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64

from coordinator.dataplane.batches import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    Compression,
    InvalidBatch,
    read_header,
    record_timestamps,
    validate_batches,
    with_base_offset,
)
from protocol.errors import ErrorCode

BASE_TS = 1_700_000_000_000
MAX = 1_048_588


def ts(milliseconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(milliseconds / 1000, datetime.UTC)


def kio_batch(
    values: list[bytes],
    *,
    first_ts: int = BASE_TS,
    step_ms: int = 1000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    headers: tuple[RecordHeader, ...] = (),
) -> bytes:
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=ts(first_ts + i * step_ms),
            offset=i64(i),
            key=b"key-%d" % i,
            value=v,
            headers=headers,
        )
        for i, v in enumerate(values)
    )
    buf = io.BytesIO()
    write_new_batch(
        buf,
        NewRecordBatch(
            producer_id=i64(producer_id),
            producer_epoch=i16(producer_epoch),
            base_sequence=i32(base_sequence),
            records=records,
            attributes=i16(attributes),
            partition_leader_epoch=i32(-1),
        ),
    )
    return buf.getvalue()


def zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(
    offset_delta: int,
    ts_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: list[tuple[bytes, bytes | None]] | None = None,
    extra: bytes = b"",
    length_adjust: int = 0,
) -> bytes:
    def blob(b: bytes | None) -> bytes:
        return zigzag(-1) if b is None else zigzag(len(b)) + b

    body = b"\x00" + zigzag(ts_delta) + zigzag(offset_delta) + blob(key) + blob(value)
    headers = headers or []
    body += zigzag(len(headers)) + b"".join(blob(k) + blob(v) for k, v in headers) + extra
    return zigzag(len(body) + length_adjust) + body


def raw_batch(
    payload: bytes,
    *,
    count: int,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
    attributes: int = 0,
    magic: int = 2,
    base_ts: int = BASE_TS,
    max_ts: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
) -> bytes:
    """A batch with any header values, and a CRC that matches them."""
    if last_offset_delta is None:
        last_offset_delta = count - 1
    max_ts = base_ts if max_ts is None else max_ts
    body = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    body += payload
    return struct.pack(">qiibI", base_offset, 9 + len(body), leader_epoch, magic, crc32c(body)) + body


def recompressed(batch: bytes, codec: int, payload: bytes) -> bytes:
    """The same header fields with another codec and payload, CRC and length fixed up."""
    h = read_header(batch)
    return raw_batch(
        payload,
        count=h.records_count,
        last_offset_delta=h.last_offset_delta,
        attributes=(h.attributes & ~7) | codec,
        base_ts=h.base_timestamp,
        max_ts=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        leader_epoch=h.partition_leader_epoch,
    )


def with_crc_fixed(batch: bytes) -> bytes:
    data = bytearray(batch)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


def patch(batch: bytes, fmt: str, offset: int, value: int, fix_crc: bool = True) -> bytes:
    data = bytearray(batch)
    struct.pack_into(fmt, data, offset, value)
    return with_crc_fixed(bytes(data)) if fix_crc else bytes(data)


def rejected(data: bytes | None, max_batch_bytes: int = MAX, allow_zstd: bool = True) -> ErrorCode:
    with pytest.raises(InvalidBatch) as info:
        validate_batches(data, max_batch_bytes=max_batch_bytes, allow_zstd=allow_zstd)
    assert info.value.message
    return info.value.error_code


# -- valid batches -------------------------------------------------------------------------------------------


def test_a_kio_batch_is_valid_and_described_by_its_header() -> None:
    data = kio_batch([b"a", b"bb", b"ccc"])
    (batch,) = validate_batches(data, max_batch_bytes=MAX)
    assert batch.data == data
    h = batch.header
    assert (h.base_offset, h.magic, h.records_count, h.last_offset_delta) == (0, 2, 3, 2)
    assert h.size == len(data)
    assert batch.max_timestamp == BASE_TS + 2000
    assert not h.is_transactional and not h.is_control and h.compression == Compression.NONE


def test_several_batches_in_one_buffer() -> None:
    first, second = kio_batch([b"a"]), kio_batch([b"b", b"c"], headers=(RecordHeader(key=b"h", value=None),))
    batches = validate_batches(first + second, max_batch_bytes=MAX)
    assert [b.data for b in batches] == [first, second]
    assert [b.header.records_count for b in batches] == [1, 2]


def test_memoryview_input() -> None:
    data = kio_batch([b"x"])
    assert validate_batches(memoryview(data), max_batch_bytes=MAX)[0].data == data


def test_idempotent_batch_keeps_producer_fields() -> None:
    data = kio_batch([b"a", b"b"], producer_id=42, producer_epoch=3, base_sequence=7)
    (batch,) = validate_batches(data, max_batch_bytes=MAX)
    assert (batch.header.producer_id, batch.header.producer_epoch, batch.header.base_sequence) == (42, 3, 7)


def test_partition_leader_epoch_is_not_covered_by_the_crc() -> None:
    data = patch(kio_batch([b"a"]), ">i", 12, 12345, fix_crc=False)
    assert validate_batches(data, max_batch_bytes=MAX)[0].header.partition_leader_epoch == 12345


def test_null_key_value_and_header_value() -> None:
    payload = encode_record(0, key=None, value=None, headers=[(b"h", None), (b"", b"x")])
    assert len(validate_batches(raw_batch(payload, count=1), max_batch_bytes=MAX)) == 1


def test_with_base_offset_keeps_the_batch_valid() -> None:
    data = kio_batch([b"a", b"b"])
    moved = with_base_offset(data, 1000)
    assert moved[8:] == data[8:]
    decoded, size = read_batch(moved, 0)  # kio checks the CRC too
    assert size == len(moved)
    assert [r.offset for r in decoded.records] == [1000, 1001]


def test_record_timestamps() -> None:
    data = with_base_offset(kio_batch([b"a", b"b", b"c"], step_ms=5000), 10)
    assert record_timestamps(data) == [(10, BASE_TS), (11, BASE_TS + 5000), (12, BASE_TS + 10000)]


def test_record_timestamps_under_log_append_time_are_the_batch_max() -> None:
    payload = encode_record(0, ts_delta=0) + encode_record(1, ts_delta=5)
    data = raw_batch(payload, count=2, attributes=0x08, max_ts=BASE_TS + 99)
    (batch,) = validate_batches(data, max_batch_bytes=MAX)
    assert batch.max_timestamp == BASE_TS + 99
    assert record_timestamps(data) == [(0, BASE_TS + 99), (1, BASE_TS + 99)]


def test_max_timestamp_comes_from_the_records_not_the_header() -> None:
    payload = encode_record(0, ts_delta=0) + encode_record(1, ts_delta=7000) + encode_record(2, ts_delta=3000)
    data = raw_batch(payload, count=3, max_ts=BASE_TS)  # header understates it
    assert validate_batches(data, max_batch_bytes=MAX)[0].max_timestamp == BASE_TS + 7000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(st.none(), st.binary(max_size=300)),
            st.lists(
                st.tuples(st.binary(max_size=10), st.one_of(st.none(), st.binary(max_size=10))), max_size=3
            ),
            st.integers(-(2**40), 2**40),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_any_well_formed_batch_is_accepted(records: list) -> None:
    payload = b"".join(
        encode_record(i, ts_delta=d, key=k, value=v, headers=h) for i, (k, v, h, d) in enumerate(records)
    )
    data = raw_batch(payload, count=len(records))
    (batch,) = validate_batches(data, max_batch_bytes=1 << 30)
    assert batch.max_timestamp == BASE_TS + max(d for *_, d in records)
    assert [o for o, _ in record_timestamps(data) or []] == list(range(len(records)))


# -- framing and CRC -> CORRUPT_MESSAGE ----------------------------------------------------------------------


def test_every_bit_flip_under_the_crc_is_caught() -> None:
    data = kio_batch([b"hello", b"world"], headers=(RecordHeader(key=b"h", value=b"v"),))
    for position in range(ATTRIBUTES_OFFSET, len(data)):
        for bit in range(8):
            broken = bytearray(data)
            broken[position] ^= 1 << bit
            assert rejected(bytes(broken)) == ErrorCode.corrupt_message, (position, bit)


def test_a_wrong_crc_field_is_caught() -> None:
    data = bytearray(kio_batch([b"a"]))
    data[20] ^= 0x01
    assert rejected(bytes(data)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_magic_other_than_2(magic: int) -> None:
    data = bytearray(kio_batch([b"a"]))
    data[16] = magic
    assert rejected(bytes(data)) == ErrorCode.corrupt_message


def test_every_truncation_is_caught() -> None:
    data = kio_batch([b"a", b"bb"])
    for length in range(1, len(data)):
        assert rejected(data[:length]) == ErrorCode.corrupt_message, length


def test_truncated_second_batch() -> None:
    first = kio_batch([b"a"])
    second = kio_batch([b"b"])
    assert rejected(first + second[:-1]) == ErrorCode.corrupt_message
    assert rejected(first + b"\x00" * 5) == ErrorCode.corrupt_message


def test_batch_length_too_small_or_too_large() -> None:
    data = kio_batch([b"a"])
    assert rejected(patch(data, ">i", 8, 48)) == ErrorCode.corrupt_message
    assert rejected(patch(data, ">i", 8, -1)) == ErrorCode.corrupt_message
    assert rejected(patch(data, ">i", 8, len(data) - 12 + 1)) == ErrorCode.corrupt_message
    # shorter than the records: the CRC is then computed over fewer bytes and the rest is trailing garbage
    assert rejected(patch(data, ">i", 8, len(data) - 12 - 1, fix_crc=False)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("count", [0, 1, 3, 100, -1])
def test_records_count_not_matching_the_records(count: int) -> None:
    data = kio_batch([b"a", b"b"])
    broken = patch(patch(data, ">i", 57, count), ">i", 23, max(count - 1, 0))
    assert rejected(broken) == ErrorCode.corrupt_message


def test_record_count_wrong_without_fixing_the_crc() -> None:
    assert rejected(patch(kio_batch([b"a", b"b"]), ">i", 57, 3, fix_crc=False)) == ErrorCode.corrupt_message


def test_record_longer_than_its_fields() -> None:
    payload = encode_record(0, extra=b"\x00")
    assert rejected(raw_batch(payload, count=1)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("adjust", [-1, 1, 1000])
def test_record_length_not_matching_its_fields(adjust: int) -> None:
    payload = encode_record(0, length_adjust=adjust) + encode_record(1)
    assert rejected(raw_batch(payload, count=2)) == ErrorCode.corrupt_message


def test_garbage_after_the_last_record() -> None:
    payload = encode_record(0) + b"\x02\x00"
    assert rejected(raw_batch(payload, count=1)) == ErrorCode.corrupt_message


@pytest.mark.parametrize(
    "record",
    [
        b"\x00",  # zero-length record
        b"\x01",  # negative length (-1)
        zigzag(3) + b"\x00\x00\x00",  # attributes, ts, offset, then no key length
        zigzag(5) + b"\x00\x00\x00" + zigzag(-2) + b"\x00",  # key length -2
        zigzag(6) + b"\x00\x00\x00\x00\x00" + zigzag(-1),  # negative header count
        zigzag(8) + b"\x00\x00\x00\x00\x00\x02" + zigzag(-1) + b"\x00",  # null header key
        zigzag(8) + b"\x00\x00\x00\x00\x00" + b"\xff\xff\xff",  # unterminated varint
        zigzag(12) + b"\x00\x00\x00" + b"\xff\xff\xff\xff\xff\xff" + b"\x00\x00\x00",  # over-long varint
    ],
)
def test_malformed_records(record: bytes) -> None:
    assert rejected(raw_batch(record, count=1)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(codec: int) -> None:
    data = patch(kio_batch([b"a"]), ">h", 21, codec)
    assert rejected(data) == ErrorCode.corrupt_message


# -- rules for client batches -> INVALID_RECORD --------------------------------------------------------------


def test_empty_data() -> None:
    assert rejected(b"") == ErrorCode.invalid_record
    assert rejected(None) == ErrorCode.invalid_record


def test_base_offset_must_be_zero() -> None:
    assert rejected(with_base_offset(kio_batch([b"a"]), 5)) == ErrorCode.invalid_record


def test_last_offset_delta_must_match_the_count() -> None:
    data = kio_batch([b"a", b"b"])
    assert rejected(patch(data, ">i", 23, 5)) == ErrorCode.invalid_record
    assert rejected(patch(data, ">i", 23, 0)) == ErrorCode.invalid_record


def test_empty_batch() -> None:
    assert rejected(raw_batch(b"", count=0, last_offset_delta=0)) == ErrorCode.invalid_record


def test_offset_deltas_must_count_up_from_zero() -> None:
    payload = encode_record(0) + encode_record(2)
    assert rejected(raw_batch(payload, count=2)) == ErrorCode.invalid_record


def test_control_batches_are_refused() -> None:
    assert rejected(kio_batch([b"a"], attributes=0x20)) == ErrorCode.invalid_record


def test_idempotent_batch_needs_a_sequence() -> None:
    data = kio_batch([b"a"], producer_id=1, producer_epoch=0, base_sequence=-1)
    assert rejected(data) == ErrorCode.invalid_record


# -- size --------------------------------------------------------------------------------------------------


def test_message_max_bytes_counts_the_whole_batch() -> None:
    data = kio_batch([b"x" * 100])
    assert validate_batches(data, max_batch_bytes=len(data))
    assert rejected(data, max_batch_bytes=len(data) - 1) == ErrorCode.message_too_large


def test_second_batch_too_large() -> None:
    small, large = kio_batch([b"a"]), kio_batch([b"x" * 500])
    assert rejected(small + large, max_batch_bytes=len(small) + 10) == ErrorCode.message_too_large


# -- compression --------------------------------------------------------------------------------------------


def test_gzip_batch_records_are_checked() -> None:
    plain = kio_batch([b"a", b"bb", b"ccc"], step_ms=2000)
    data = recompressed(plain, Compression.GZIP, gzip.compress(plain[HEADER_SIZE:]))
    (batch,) = validate_batches(data, max_batch_bytes=MAX)
    assert batch.header.compression == Compression.GZIP
    assert batch.max_timestamp == BASE_TS + 4000
    assert record_timestamps(data) == [(0, BASE_TS), (1, BASE_TS + 2000), (2, BASE_TS + 4000)]


def test_gzip_concatenated_members() -> None:
    payload = encode_record(0) + encode_record(1)
    data = raw_batch(gzip.compress(payload[:4]) + gzip.compress(payload[4:]), count=2, attributes=1)
    assert validate_batches(data, max_batch_bytes=MAX)


def test_gzip_batch_with_wrong_count() -> None:
    plain = kio_batch([b"a", b"b"])
    data = raw_batch(gzip.compress(plain[HEADER_SIZE:]), count=3, attributes=1)
    assert rejected(data) == ErrorCode.corrupt_message


@pytest.mark.parametrize("payload", [b"not gzip at all", b"", gzip.compress(b"\x02\x00")[:-3]])
def test_gzip_garbage(payload: bytes) -> None:
    assert rejected(raw_batch(payload, count=1, attributes=1)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_other_codecs_are_checked_down_to_the_crc(codec: int) -> None:
    data = raw_batch(b"opaque compressed bytes", count=4, attributes=codec, max_ts=BASE_TS + 9)
    (batch,) = validate_batches(data, max_batch_bytes=MAX)
    assert batch.max_timestamp == BASE_TS + 9
    assert record_timestamps(data) is None
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    assert rejected(bytes(broken)) == ErrorCode.corrupt_message
    inconsistent = raw_batch(b"x", count=4, last_offset_delta=2, attributes=codec)
    assert rejected(inconsistent) == ErrorCode.invalid_record


def test_zstd_needs_produce_v7() -> None:
    data = raw_batch(b"zstd frame", count=1, attributes=Compression.ZSTD)
    assert rejected(data, allow_zstd=False) == ErrorCode.unsupported_compression_type
    assert validate_batches(data, max_batch_bytes=MAX, allow_zstd=True)
