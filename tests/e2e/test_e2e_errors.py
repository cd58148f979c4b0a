"""Errors a user sees: producing to a missing topic with auto-creation off; malformed frames on the wire."""

from __future__ import annotations

import socket
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from tests.support.e2e import check_delivered, consume, create_topic, make_messages, produce, run_client
from tests.support.wire import WireClient

pytestmark = pytest.mark.e2e

UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture
def no_autocreate_server(server_factory):
    return server_factory({"auto.create.topics.enable": "false"})


def test_confluent_produce_to_missing_topic_fails_cleanly(no_autocreate_server, tmp_path):
    server = no_autocreate_server
    topic = "no-such-topic-ck"
    delivered = produce(
        "ck",
        server,
        topic,
        make_messages(5, seed=20),
        tmp_path,
        "--set",
        "topic.metadata.propagation.max.ms=1000",
        "--set",
        "message.timeout.ms=8000",
        "--timeout",
        "20",
    )
    assert all(d is not None for d in delivered), delivered
    names = {d["error"]["name"] for d in delivered if d["error"]}
    assert len([d for d in delivered if d["error"]]) == 5, delivered
    assert names <= {"_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_OR_PART"}, names
    assert topic not in run_client("ck", "list-topics", server)["topics"]


def test_kafka_python_produce_to_missing_topic_fails_cleanly(no_autocreate_server, tmp_path):
    server = no_autocreate_server
    topic = "no-such-topic-kp"
    delivered = produce(
        "kp",
        server,
        topic,
        make_messages(1, seed=21),
        tmp_path,
        "--set",
        "max_block_ms=2000",
        "--timeout",
        "20",
    )
    names = {d["error"]["name"] for d in delivered if d and d["error"]}
    assert len([d for d in delivered if d and d["error"]]) == 1, delivered
    assert names <= {"KafkaTimeoutError", "UnknownTopicOrPartitionError"}, names
    assert topic not in run_client("kp", "list-topics", server)["topics"]


def test_raw_metadata_for_missing_topic_reports_unknown_topic(no_autocreate_server):
    server = no_autocreate_server
    with WireClient(server.host, server.port) as c:
        resp = c.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="raw-missing"),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
    assert [(t.name, t.error_code) for t in resp.topics] == [("raw-missing", UNKNOWN_TOPIC_OR_PARTITION)]
    assert [b.node_id for b in resp.brokers] == server.node_ids


def _api_versions_ok(client: WireClient) -> None:
    resp = client.request(ApiVersionsRequest(client_software_name="e2e-raw", client_software_version="1.0"))
    assert resp.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert 18 in keys and keys[18][1] >= 3, keys


def _assert_closed(sock: socket.socket, timeout: float = 5.0) -> None:
    """The server closes the connection: EOF (or a reset) within `timeout`. Bytes before EOF are tolerated."""
    sock.settimeout(timeout)
    received = 0
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            received += len(chunk)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"connection still open {timeout}s after a malformed frame ({received} bytes received)")


BAD_FRAMES = {
    # a negative frame size
    "negative-length": struct.pack(">i", -1) + b"\x00" * 16,
    "min-int-length": struct.pack(">i", -(2**31)) + b"\x00" * 16,
    # a frame larger than socket.request.max.bytes (100 MiB by default); nothing after the prefix is sent
    "oversized-length": struct.pack(">i", 2**31 - 1),
    # a well-sized frame of garbage: api key 0xf0f1 is no API
    "garbage": struct.pack(">i", 16) + bytes(range(0xF0, 0x100)),
    # a frame too short to hold a request header
    "short-header": struct.pack(">i", 3) + b"\x00\x03\x00",
    # a Metadata v12 header followed by a body that is not valid (an unterminated varint)
    "undecodable-body": struct.pack(">i", 15) + struct.pack(">hhih", 3, 12, 99, -1) + b"\x00" + b"\xff" * 4,
}


def test_malformed_frames_close_only_their_connection(server):
    """Each bad frame on its own connection: that connection is closed, a connection opened before keeps
    working, and so does a new one. One server for all the frames (each check is independent)."""
    failures = []
    for name, frame in BAD_FRAMES.items():
        try:
            with WireClient(server.host, server.port) as good:
                _api_versions_ok(good)
                with socket.create_connection((server.host, server.port), timeout=5) as bad:
                    bad.sendall(frame)
                    _assert_closed(bad)
                _api_versions_ok(good)  # the connection opened before still works
            with WireClient(server.host, server.port) as fresh:  # and so does a new one
                _api_versions_ok(fresh)
        except (AssertionError, OSError, ValueError, pytest.fail.Exception) as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
        assert server.alive(), f"server died after the {name} frame\n{server.output()}"
    assert not failures, "\n".join(failures)


def test_fetch_from_out_of_range_offset(server, tmp_path):
    create_topic("ck", server, "out-of-range", 1)
    messages = make_messages(10, seed=40)
    check_delivered(messages, produce("ck", server, "out-of-range", messages, tmp_path), 1)

    # auto.offset.reset=error: the consumer surfaces the broker's OFFSET_OUT_OF_RANGE
    res = consume("ck", server, "out-of-range", 1, 0, tmp_path, "--start-offset", "1000", "--drain", "1.5",
                  "--set", "auto.offset.reset=error")  # fmt: skip
    assert res["records"] == []
    assert {e["name"] for e in res["errors"]} & {"_AUTO_OFFSET_RESET", "OFFSET_OUT_OF_RANGE"}, res["errors"]

    # auto.offset.reset=earliest: the consumer resets to 0 and reads everything
    res = consume("ck", server, "out-of-range", 1, 10, tmp_path, "--start-offset", "1000")
    assert [r["offset"] for r in res["records"]] == list(range(10))


def test_batch_over_message_max_bytes_is_rejected(server_factory, tmp_path):
    server = server_factory({"message.max.bytes": 10000})
    create_topic("ck", server, "small-batches", 1)
    big = make_messages(1, seed=41)
    big[0]["value"] = (b"x" * 20000).hex()
    delivered = produce("ck", server, "small-batches", big, tmp_path, "--set", "message.max.bytes=1000000",
                        "--set", "message.timeout.ms=10000")  # fmt: skip
    assert delivered[0]["error"] is not None, delivered
    assert delivered[0]["error"]["name"] == "MSG_SIZE_TOO_LARGE", delivered[0]["error"]

    small = make_messages(5, seed=42)  # and the topic still takes batches under the limit
    check_delivered(small, produce("ck", server, "small-batches", small, tmp_path), 1)
