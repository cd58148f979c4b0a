"""Framing, headers, the API table and `build`: exact bytes and error paths."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import UnknownAPIKey, UnknownEntity
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatV0
from kio.schema.heartbeat.v4.request import HeartbeatRequest as HeartbeatV4
from kio.schema.heartbeat.v4.response import HeartbeatResponse as HeartbeatResponseV4
from kio.schema.join_group.v0.response import JoinGroupResponse as JoinGroupResponseV0
from kio.schema.join_group.v9.response import JoinGroupResponse as JoinGroupResponseV9

from protocol.api import ApiTable, RequestContext, decode_request_body, request_class
from protocol.build import build, ms
from protocol.errors import ErrorCode, FrameError, RequestDecodeError, UnknownApiKey
from protocol.framing import frame, frame_length
from tests.support.wire import encode_request


async def _heartbeat(ctx, request):
    return {"throttle_time": 0, "error_code": ErrorCode.none}


def _table() -> ApiTable:
    table = ApiTable()
    table.register(12, 0, 4, _heartbeat)
    return table


def test_frame_length_bounds():
    assert frame_length(struct.pack(">i", 0)) == 0
    assert frame_length(struct.pack(">i", 100), max_bytes=100) == 100
    with pytest.raises(FrameError):
        frame_length(struct.pack(">i", 101), max_bytes=100)
    with pytest.raises(FrameError):
        frame_length(struct.pack(">i", -1))
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"


def test_request_header_v1_and_v2():
    table = _table()
    v0 = table.decode(encode_request(HeartbeatV0(group_id="g", generation_id=3, member_id="m"), 7)[4:])
    assert (v0.context.api_key, v0.context.api_version, v0.context.correlation_id) == (12, 0, 7)
    assert v0.context.client_id == "test"
    assert v0.body.generation_id == 3
    v4 = table.decode(
        encode_request(HeartbeatV4(group_id="g", generation_id=3, member_id="m", group_instance_id="i"), 8)[
            4:
        ]
    )
    assert v4.body.group_instance_id == "i"
    null_client = table.decode(
        encode_request(HeartbeatV4(group_id="g", generation_id=1, member_id="m"), 9, client_id=None)[4:]
    )
    assert null_client.context.client_id is None


def test_response_header_v0_for_old_and_v1_for_flexible():
    table = _table()
    ctx = RequestContext(12, 0, 5, "c")
    assert table.encode_response(ctx, {"error_code": ErrorCode.none}) == struct.pack(">ih", 5, 0)
    ctx4 = RequestContext(12, 4, 6, "c")
    # correlation id, empty header tags, throttle, error code, empty body tags
    assert table.encode_response(
        ctx4, {"throttle_time": 0, "error_code": ErrorCode.rebalance_in_progress}
    ) == (struct.pack(">i", 6) + b"\x00" + struct.pack(">ih", 0, 27) + b"\x00")


def test_api_versions_response_header_is_always_v0():
    table = _table()
    ctx = RequestContext(18, 3, 11, "c")
    body = asyncio.run(table.spec(18).handler(ctx, None))
    payload = table.encode_response(ctx, body)
    # correlation id directly followed by the error code: no tagged-field byte in the header
    assert payload[:6] == struct.pack(">ih", 11, 0)


def test_unknown_key_short_frame_and_truncated_body():
    table = _table()
    with pytest.raises(UnknownApiKey):
        table.decode(struct.pack(">hhi", 77, 0, 1) + b"\xff\xff")
    with pytest.raises(RequestDecodeError):
        table.decode(b"\x00\x12\x00")
    good = encode_request(HeartbeatV4(group_id="group", generation_id=1, member_id="m"), 1)[4:]
    with pytest.raises(RequestDecodeError):
        table.decode(good[:-3])


def test_unsupported_version_is_decoded_without_body():
    table = ApiTable()
    table.register(12, 0, 3, _heartbeat)
    decoded = table.decode(struct.pack(">hhi", 12, 4, 1))  # kio knows v4, the table stops at v3
    assert decoded.body is None
    answer = table.unsupported_version_response(decoded.context)
    assert answer.error_code == ErrorCode.unsupported_version
    # a version nobody knows has no response shape: None tells the connection to close
    assert table.unsupported_version_response(table.decode(struct.pack(">hhi", 12, 9, 1)).context) is None
    api = table.decode(struct.pack(">hhi", 18, 77, 2))
    v0 = table.unsupported_version_response(api.context)
    assert isinstance(v0, ApiVersionsV0)
    assert {k.api_key for k in v0.api_keys} == {12, 18}


def test_build_drops_fields_older_versions_lack_and_recurses():
    data = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "generation_id": 4,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": "a",
        "skip_assignment": True,
        "member_id": "a",
        "members": [{"member_id": "a", "group_instance_id": "i", "metadata": b"x"}],
    }
    v9 = build(JoinGroupResponseV9, data)
    assert v9.skip_assignment is True and v9.members[0].group_instance_id == "i"
    v0 = build(JoinGroupResponseV0, v9)
    assert v0.members[0].member_id == "a" and v0.members[0].metadata == b"x"
    assert not hasattr(v0, "skip_assignment")
    assert ms(build(HeartbeatResponseV4, throttle_time=250, error_code=ErrorCode.none).throttle_time) == 250


def test_register_refuses_versions_kio_does_not_know():
    table = ApiTable()
    with pytest.raises(UnknownEntity):
        table.register(12, 0, 99, _heartbeat)
    with pytest.raises(UnknownAPIKey):
        table.register(9999, 0, 0, _heartbeat)


def test_register_imports_no_schema_module_until_a_request_needs_it():
    """Registering checks kio's index only: importing every version's schema modules at start (~370 of them)
    was most of a worker's start-up time. In a fresh interpreter, since this one has imported many already."""
    code = (
        "import sys\n"
        "from protocol.api import ApiTable, request_class\n"
        "t = ApiTable()\n"
        "t.register(29, 1, 3, None)\n"  # DescribeAcls
        "assert 'kio.schema.describe_acls.v3.request' not in sys.modules\n"
        "request_class(29, 3)\n"
        "assert 'kio.schema.describe_acls.v3.request' in sys.modules\n"
    )
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=repo)
    assert proc.returncode == 0, proc.stderr


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_raise_our_error(data):
    table = _table()
    table.register(11, 0, 9, _heartbeat)
    try:
        table.decode(data)
    except (RequestDecodeError, UnknownApiKey):
        pass


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from([(12, v) for v in range(5)] + [(18, v) for v in range(5)] + [(11, v) for v in range(10)]),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.binary(max_size=200),
)
def test_valid_prefix_with_garbage_body_never_crashes(key_version, correlation, body):
    api_key, version = key_version
    table = _table()
    table.register(11, 0, 9, _heartbeat)
    raw = struct.pack(">hhi", api_key, version, correlation) + body
    try:
        decoded = table.decode(raw)
    except (RequestDecodeError, UnknownApiKey):
        return
    assert decoded.context.correlation_id == correlation
    if decoded.body is not None:
        assert isinstance(decoded.body, request_class(api_key, version))


def _frame(body: object, header_tags: bytes = b"\x00") -> bytes:
    """A request frame without its length prefix, the header's tagged fields as given."""
    frame = encode_request(body, 7)[4:]
    # client id "test" ends the header's fixed part at 2 + 2 + 4 + 2 + 4 = 14; its tag count byte follows
    return frame[:14] + header_tags + frame[15:]


def test_unknown_tagged_fields_are_skipped_as_kafka_does():
    import datetime
    import uuid

    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions
    from kio.schema.fetch.v12.request import FetchRequest
    from kio.static.primitive import i32

    from protocol.shape import strip_unknown_tags

    table = ApiTable()
    table.register(68, 0, 1, lambda ctx, req: None)
    table.register(1, 4, 15, lambda ctx, req: None)
    topic = uuid.uuid4()
    hb = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="m",
        member_epoch=i32(3),
        rebalance_timeout=datetime.timedelta(seconds=5),
        subscribed_topic_names=("t",),
        topic_partitions=(TopicPartitions(topic_id=topic, partitions=(i32(0), i32(1))),),
    )
    plain = _frame(hb)
    # a tag (9, 2 bytes) in the header, in the nested TopicPartitions entry and at the end of the body
    nested_end = plain.index(b"\x00\x00\x00\x01", plain.index(topic.bytes)) + 4  # after partition 1
    tagged = (
        plain[:14] + b"\x01\x09\x02ab" + plain[15:nested_end] + b"\x01\x05\x01z" + plain[nested_end + 1 : -1]
    )
    tagged += b"\x02\x07\x00\x0b\x03xyz"  # two unknown tags at the top level
    decoded = table.decode(tagged)
    assert decoded.body == hb and decoded.context.client_id == "test"
    assert decode_request_body(tagged) == hb  # the same for a request looked into on its way elsewhere
    assert strip_unknown_tags(type(hb), plain, 15) is None  # nothing to strip: the frame is left alone
    # a known tagged field (Fetch's ClusterId, tag 0) is kept while an unknown one beside it goes
    fetch = FetchRequest(
        cluster_id="c1",
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=i32(1),
        max_bytes=i32(1024),
        isolation_level=0,
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    frame = _frame(fetch)
    assert frame.endswith(b"\x01\x00\x03\x03c1")  # one tagged field: tag 0, 3 bytes, compact "c1"
    with_unknown = frame[:-6] + b"\x02\x00\x03\x03c1\x63\x01\x00"
    assert table.decode(with_unknown).body == fetch
    assert decode_request_body(with_unknown) == fetch


def test_offset_commit_answers_are_encoded_once_and_the_same_as_any_answer():
    """OffsetCommit answers of a few partitions come from a cache of encoded bodies: the bytes are those of the
    uncached encoding at every version, the correlation id is each request's own, and an answer with many
    partitions or an unhashable field is encoded each time."""
    from kio.schema.offset_commit.v9.response import (
        OffsetCommitResponse,
        OffsetCommitResponsePartition,
        OffsetCommitResponseTopic,
    )

    from protocol import api

    def answer(partitions: int, error: ErrorCode = ErrorCode.none) -> OffsetCommitResponse:
        return build(
            OffsetCommitResponse,
            {
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": i, "error_code": error} for i in range(partitions)
                        ],
                    }
                ]
            },
        )

    table = ApiTable()
    api._reused_body.cache_clear()
    api._ENCODED.clear()
    for version in range(2, 10):  # the versions this server serves
        for make in (lambda: answer(1), lambda: answer(3, ErrorCode.illegal_generation)):
            response = make()
            body = api._encode_body(api.response_class(8, version), 8, response)  # as any answer is encoded
            # the same object again (found by identity), then an equal one (found by value)
            for correlation, sent in ((40 + version, response), (90, response), (91, make())):
                got = table.encode_response(RequestContext(8, version, correlation, "c"), sent)
                assert got == struct.pack(">i", correlation) + body
    assert api._reused_body.cache_info().hits == 16  # the equal one of each triple
    assert api._reused_body.cache_info().misses == 16
    big = answer(api.CACHED_COMMIT_PARTITIONS + 1)
    listed = OffsetCommitResponse(
        throttle_time=big.throttle_time,
        topics=[
            OffsetCommitResponseTopic(
                name="t",
                partitions=[OffsetCommitResponsePartition(partition_index=0, error_code=ErrorCode.none)],
            )
        ],
    )
    before = api._reused_body.cache_info().currsize
    for response in (big, listed):
        got = table.encode_response(RequestContext(8, 9, 1, "c"), response)
        assert got == struct.pack(">i", 1) + api._encode_body(api.response_class(8, 9), 8, response)
    assert api._reused_body.cache_info().currsize == before
