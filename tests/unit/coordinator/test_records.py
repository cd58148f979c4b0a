"""The __consumer_offsets record codec: exact bytes, round trips of every version, and garbage."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coordinator.records as records_module
from coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordDecodeError,
    UnknownRecordType,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
    new_empty_group_metadata_record,
    new_group_metadata_tombstone,
    new_offset_commit_record,
    new_offset_commit_tombstone,
)

# -- exact layouts (field order and types of Kafka's JSON schemas) -------------------------------------------


def _str(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_key_layout():
    key = OffsetCommitKey("g", "t", 7)
    assert encode_key(key) == struct.pack(">h", 1) + _str("g") + _str("t") + struct.pack(">i", 7)
    assert decode_key(encode_key(key)) == key


def test_offset_commit_key_version_0_reads_as_offset_commit_key():
    assert decode_key(struct.pack(">h", 0) + _str("g") + _str("t") + struct.pack(">i", 7)) == OffsetCommitKey(
        "g", "t", 7
    )


def test_group_metadata_key_layout():
    assert encode_key(GroupMetadataKey("grp")) == struct.pack(">h", 2) + _str("grp")


def test_offset_commit_value_v3_layout():
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp_ms=1000)
    assert encode_value(value) == (struct.pack(">hqi", 3, 42, 5) + _str("m") + struct.pack(">q", 1000))


def test_offset_commit_value_with_expire_timestamp_is_written_as_v1():
    value = OffsetCommitValue(
        offset=42, leader_epoch=5, metadata="", commit_timestamp_ms=1000, expire_timestamp_ms=2000
    )
    assert encode_value(value) == struct.pack(">hq", 1, 42) + _str("") + struct.pack(">qq", 1000, 2000)
    # v1 has no leader epoch
    assert decode_value(OffsetCommitKey("g", "t", 0), encode_value(value)) == OffsetCommitValue(
        42, -1, "", 1000, 2000
    )


def test_group_metadata_value_v3_layout():
    member = MemberMetadata("m1", "i1", "c", "/h", 300, 200, b"\x01", b"\x02\x03")
    value = GroupMetadataValue("consumer", 4, "range", "m1", 123, (member,))
    expected = (
        struct.pack(">h", 3)
        + _str("consumer")
        + struct.pack(">i", 4)
        + _str("range")
        + _str("m1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + _str("m1")
        + _str("i1")
        + _str("c")
        + _str("/h")
        + struct.pack(">ii", 300, 200)
        + struct.pack(">i", 1)
        + b"\x01"
        + struct.pack(">i", 2)
        + b"\x02\x03"
    )
    assert encode_value(value) == expected


def test_group_metadata_value_nulls():
    value = GroupMetadataValue("", 0, None, None, -1, ())
    assert encode_value(value) == (
        struct.pack(">h", 3)
        + _str("")
        + struct.pack(">i", 0)
        + struct.pack(">hh", -1, -1)
        + struct.pack(">q", -1)
        + struct.pack(">i", 0)
    )


def test_group_metadata_value_v4_is_flexible():
    member = MemberMetadata("m", None, "c", "h", 1, 2, b"s", b"a")
    value = GroupMetadataValue("consumer", 1, "range", "m", 9, (member,))
    expected = (
        struct.pack(">h", 4)
        + b"\x09consumer"
        + struct.pack(">i", 1)
        + b"\x06range"
        + b"\x02m"
        + struct.pack(">q", 9)
        + b"\x02"  # one member
        + b"\x02m"
        + b"\x00"
        + b"\x02c"
        + b"\x02h"
        + struct.pack(">ii", 1, 2)
        + b"\x02s"
        + b"\x02a"
        + b"\x00"
        + b"\x00"
    )
    assert encode_value(value, 4) == expected
    assert decode_value(GroupMetadataKey("g"), expected) == value


def test_v4_tagged_fields_are_skipped():
    # OffsetCommitValue v4 with one unknown tagged field (tag 7, 3 bytes)
    data = struct.pack(">hqi", 4, 1, 2) + b"\x02m" + struct.pack(">q", 3) + b"\x01\x07\x03abc"
    assert decode_value(OffsetCommitKey("g", "t", 0), data) == OffsetCommitValue(1, 2, "m", 3)


def test_tombstones():
    assert new_offset_commit_tombstone("g", "t", 1) == CoordinatorRecord(
        encode_key(OffsetCommitKey("g", "t", 1)), None
    )
    assert decode_record(new_group_metadata_tombstone("g")) == (GroupMetadataKey("g"), None)


def test_helpers():
    record = new_offset_commit_record("g", "t", 1, 10, leader_epoch=3, metadata="x", commit_timestamp_ms=5)
    assert decode_record(record) == (OffsetCommitKey("g", "t", 1), OffsetCommitValue(10, 3, "x", 5, -1))
    assert decode_record(new_empty_group_metadata_record("g", 77)) == (
        GroupMetadataKey("g"),
        GroupMetadataValue("", 0, None, None, 77, ()),
    )


def test_unknown_record_types_are_a_decode_error_of_their_own():
    with pytest.raises(UnknownRecordType) as info:
        decode_key(struct.pack(">h", 3) + _str("g"))
    assert info.value.version == 3
    assert isinstance(info.value, RecordDecodeError)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        struct.pack(">h", -1),
        struct.pack(">h", 2) + struct.pack(">h", 5) + b"ab",  # short string
        struct.pack(">h", 2) + struct.pack(">h", -1),  # null group
        struct.pack(">h", 2) + _str("g") + b"x",  # trailing byte
        struct.pack(">h", 2) + struct.pack(">h", 1) + b"\xff",  # bad UTF-8
    ],
)
def test_bad_keys(data):
    with pytest.raises(RecordDecodeError):
        decode_key(data)


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">h", 5) + b"\x00" * 30,  # unknown version
        struct.pack(">h", 3)
        + _str("consumer")
        + struct.pack(">i", 1)
        + struct.pack(">hh", -1, -1)
        + struct.pack(">q", 0)
        + struct.pack(">i", 1_000_000),  # absurd member count
        struct.pack(">h", 3)
        + _str("consumer")
        + struct.pack(">i", 1)
        + struct.pack(">hh", -1, -1)
        + struct.pack(">q", 0)
        + struct.pack(">i", -2),  # negative array length
    ],
)
def test_bad_group_metadata_values(data):
    with pytest.raises(RecordDecodeError):
        decode_value(GroupMetadataKey("g"), data)


# -- round trips (Hypothesis) --------------------------------------------------------------------------------

_text = st.text(max_size=20)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)

offset_commit_keys = st.builds(OffsetCommitKey, _text, _text, _i32)
group_metadata_keys = st.builds(GroupMetadataKey, _text)
offset_commit_values = st.builds(OffsetCommitValue, _i64, _i32, _text, _i64, _i64)
members = st.builds(
    MemberMetadata,
    _text,
    st.none() | _text,
    _text,
    _text,
    _i32,
    _i32,
    st.binary(max_size=20),
    st.binary(max_size=20),
)
group_metadata_values = st.builds(
    GroupMetadataValue,
    _text,
    _i32,
    st.none() | _text,
    st.none() | _text,
    _i64,
    st.lists(members, max_size=4).map(tuple),
)


def _as_read_back(value, version):
    """What a value looks like after a trip through `version`: the fields it lacks take their defaults."""
    if isinstance(value, OffsetCommitValue):
        return OffsetCommitValue(
            value.offset,
            value.leader_epoch if version >= 3 else -1,
            value.metadata,
            value.commit_timestamp_ms,
            value.expire_timestamp_ms if version == 1 else -1,
        )
    return GroupMetadataValue(
        value.protocol_type,
        value.generation,
        value.protocol,
        value.leader,
        value.current_state_timestamp_ms if version >= 2 else -1,
        tuple(
            MemberMetadata(
                m.member_id,
                m.group_instance_id if version >= 3 else None,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms if version >= 1 else -1,
                m.session_timeout_ms,
                m.subscription,
                m.assignment,
            )
            for m in value.members
        ),
    )


@given(st.one_of(offset_commit_keys, group_metadata_keys))
def test_key_round_trip(key):
    assert decode_key(encode_key(key)) == key


@given(offset_commit_values, st.integers(0, 4))
def test_offset_commit_value_round_trip(value, version):
    data = encode_value(value, version)
    assert decode_value(OffsetCommitKey("g", "t", 0), data) == _as_read_back(value, version)


@given(group_metadata_values, st.integers(0, 4))
def test_group_metadata_value_round_trip(value, version):
    data = encode_value(value, version)
    assert decode_value(GroupMetadataKey("g"), data) == _as_read_back(value, version)


@given(offset_commit_values)
def test_offset_commit_value_default_version_round_trips_exactly(value):
    assert decode_value(OffsetCommitKey("g", "t", 0), encode_value(value)) == _as_read_back(
        value, 1 if value.expire_timestamp_ms != -1 else 3
    )


@given(group_metadata_values)
def test_group_metadata_value_default_version_keeps_everything(value):
    assert decode_value(GroupMetadataKey("g"), encode_value(value)) == value


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_garbage_keys_only_raise_record_decode_error(data):
    try:
        decode_key(data)
    except RecordDecodeError:
        pass


@settings(max_examples=300)
@given(st.one_of(offset_commit_keys, group_metadata_keys), st.binary(max_size=96))
def test_garbage_values_only_raise_record_decode_error(key, data):
    try:
        decode_value(key, data)
    except RecordDecodeError:
        pass


@given(group_metadata_values, st.integers(0, 4), st.data())
def test_truncated_values_raise_record_decode_error(value, version, data):
    encoded = encode_value(value, version)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RecordDecodeError):
        decode_value(GroupMetadataKey("g"), encoded[:cut])


# -- the fast decoders agree with the general one ------------------------------------------------------------
# decode_key/decode_value/decode_record take common OffsetCommit records given as `bytes` through struct-based
# fast paths; anything else (here: the same bytes as a bytearray) goes through the general _Reader decoder.
# Both must give the same records, and the same errors (type and message) on anything else.


def _outcome(decode, *args):
    try:
        return "ok", decode(*args)
    except RecordDecodeError as exc:
        return type(exc), str(exc)


@st.composite
def _damaged(draw, encoded):
    """A valid encoding, often damaged (up to twice): a flipped byte, a cut, extra bytes, or a length or
    version overwritten (the fields the fast paths check)."""
    data = bytearray(draw(encoded))
    for damage in draw(st.lists(st.sampled_from(["flip", "cut", "extend", "int16"]), max_size=2)):
        if damage == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif damage == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif damage == "extend":
            data += draw(st.binary(min_size=1, max_size=4))
        elif damage == "int16" and len(data) >= 2:
            at = draw(st.integers(0, len(data) - 2))
            value = draw(st.sampled_from([-8, -2, -1, 0, 1, 2, 3, 4, 5, 0x7FFF]))
            data[at : at + 2] = struct.pack(">h", value)
    return bytes(data)


_any_key_bytes = st.one_of(
    st.binary(max_size=40),
    _damaged(st.one_of(offset_commit_keys, group_metadata_keys).map(encode_key)),
    _damaged(offset_commit_keys.map(lambda k: struct.pack(">h", 0) + encode_key(k)[2:])),  # key version 0
)
_any_offset_value_bytes = st.one_of(
    st.binary(max_size=40),
    _damaged(st.builds(encode_value, offset_commit_values, st.integers(0, 4))),
)


@settings(max_examples=500)
@given(_any_key_bytes)
def test_fast_key_decoding_agrees_with_the_general_decoder(data):
    assert _outcome(decode_key, data) == _outcome(decode_key, bytearray(data))


@settings(max_examples=500)
@given(_any_offset_value_bytes)
def test_fast_value_decoding_agrees_with_the_general_decoder(data):
    key = OffsetCommitKey("g", "t", 0)
    assert _outcome(decode_value, key, data) == _outcome(decode_value, key, bytearray(data))


@settings(max_examples=300)
@given(st.lists(st.tuples(_any_key_bytes, st.none() | _any_offset_value_bytes), min_size=1, max_size=6))
def test_fast_record_decoding_agrees_with_the_general_decoder(records):
    # In sequence, so that keys continue (or break) the run of the key before, as in a log.
    for key, value in records:
        general = CoordinatorRecord(bytearray(key), None if value is None else bytearray(value))  # type: ignore[arg-type]
        assert _outcome(decode_record, CoordinatorRecord(key, value)) == _outcome(decode_record, general)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("metadata_length", [-8, -4, -1])
def test_negative_metadata_lengths_that_fit_the_size_are_still_errors(version, metadata_length):
    # Sized so that the metadata would end where the fixed fields after it begin, were its length believed.
    head = struct.pack(">hqi", version, 1, 2) if version >= 3 else struct.pack(">hq", version, 1)
    tail = 16 if version == 1 else 8
    data = head + struct.pack(">h", metadata_length) + bytes(tail + metadata_length)
    with pytest.raises(RecordDecodeError):
        decode_value(OffsetCommitKey("g", "t", 0), data)


def test_keys_that_continue_a_run_decode_like_any_other():
    first = encode_key(OffsetCommitKey("group", "topic", 1))
    same_run = encode_key(OffsetCommitKey("group", "topic", 2))
    other_group = encode_key(OffsetCommitKey("grouq", "topic", 2))  # same length, other bytes
    assert decode_key(first) == OffsetCommitKey("group", "topic", 1)
    assert decode_key(same_run) == OffsetCommitKey("group", "topic", 2)
    assert decode_key(other_group) == OffsetCommitKey("grouq", "topic", 2)
    assert decode_key(same_run) == OffsetCommitKey("group", "topic", 2)
    with pytest.raises(RecordDecodeError, match="trailing"):
        decode_key(same_run + b"x")  # the run's prefix, but one byte too many
    with pytest.raises(RecordDecodeError):
        decode_key(same_run[:-1])
    assert decode_key(encode_key(GroupMetadataKey("group"))) == GroupMetadataKey("group")
    assert decode_record(CoordinatorRecord(same_run, None)) == (OffsetCommitKey("group", "topic", 2), None)


def test_record_classes_keep_their_dataclass_constructors():
    value = OffsetCommitValue(offset=1, metadata="m")
    assert value == OffsetCommitValue(1, -1, "m", -1, -1)
    assert dataclasses.replace(value, offset=2) == OffsetCommitValue(2, -1, "m", -1, -1)
    assert CoordinatorRecord(key=b"k", value=None) == CoordinatorRecord(b"k", None)
    assert GroupMetadataValue("c", 1, None, None) == GroupMetadataValue("c", 1, None, None, -1, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.offset = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        OffsetCommitKey("g", "t")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        OffsetCommitValue(1, bogus=2)  # type: ignore[call-arg]


@given(offset_commit_keys, offset_commit_values, st.booleans())
def test_offset_commit_records_are_the_bytes_of_encode_key_and_encode_value(key, value, with_expiry):
    """new_offset_commit_record's fast path (no expire timestamp) writes exactly what the general encoders do."""
    expire = value.expire_timestamp_ms if with_expiry else -1
    record = new_offset_commit_record(
        key.group,
        key.topic,
        key.partition,
        value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp_ms,
        expire_timestamp_ms=expire,
    )
    expected = dataclasses.replace(value, expire_timestamp_ms=expire)
    assert record == CoordinatorRecord(encode_key(key), encode_value(expected))
    # the key of a partition committed before is remembered: the same bytes again
    again = new_offset_commit_record(key.group, key.topic, key.partition, 0, commit_timestamp_ms=0)
    assert again.key == record.key


def test_offset_commit_records_of_long_strings_are_refused_as_before():
    with pytest.raises(ValueError, match="too long"):
        new_offset_commit_record("g", "t", 0, 1, metadata="m" * 0x8000, commit_timestamp_ms=1)


_simple_values = st.builds(
    lambda offset, epoch, ts: (
        new_offset_commit_record("g", "t", 0, offset, leader_epoch=epoch, commit_timestamp_ms=ts).value
    ),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
)
_simple_keys = st.builds(
    lambda version, group, topic, partition: (
        struct.pack(">h", version) + encode_key(OffsetCommitKey(group, topic, partition))[2:]
    ),
    st.sampled_from([1, 1, 0, 2, 3, -1]),  # the key version: 0 and 1 are offset commits
    st.sampled_from(["g", "group-0", "grouq-0", "\u00e9t\u00e9", ""]),
    st.sampled_from(["t", "topic", "\u6587"]),
    st.integers(-(2**31), 2**31 - 1),
)


@settings(max_examples=400)
@given(
    st.lists(
        st.tuples(
            st.one_of(_simple_keys, _damaged(_simple_keys), _any_key_bytes),
            st.one_of(_simple_values, _damaged(_simple_values), _any_offset_value_bytes),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_compiled_simple_offset_commit_answers_as_the_python_one(records):
    # In sequence, as in a log: each remembers the last key's group and topic (a run of keys reuses them).
    if records_module.simple_offset_commit is records_module._simple_offset_commit:
        pytest.fail("coordinator._speedups is not built (pip install -e . builds it where gcc is installed)")
    for key, value in records:
        compiled = records_module.simple_offset_commit(key, value)
        assert compiled == records_module._simple_offset_commit(key, value)
        if compiled is not None:  # and it is what the general decoder reads
            k, v = decode_record(CoordinatorRecord(bytearray(key), bytearray(value)))  # type: ignore[arg-type]
            assert isinstance(k, OffsetCommitKey) and isinstance(v, OffsetCommitValue)
            assert (v.metadata, v.expire_timestamp_ms) == ("", -1)
            assert compiled == (
                k.group,
                k.topic,
                k.partition,
                v.offset,
                v.leader_epoch,
                v.commit_timestamp_ms,
            )


def test_the_compiled_simple_offset_commit_shares_a_run_s_strings():
    first = new_offset_commit_record("group", "topic", 0, 5, commit_timestamp_ms=1)
    second = new_offset_commit_record("group", "topic", 1, 6, commit_timestamp_ms=1)
    a = records_module.simple_offset_commit(first.key, first.value)
    b = records_module.simple_offset_commit(second.key, second.value)
    assert a is not None and b is not None
    assert a[0] is b[0] and a[1] is b[1]  # one group and one topic string for the whole run
    assert b == ("group", "topic", 1, 6, -1, 1)
