"""The tests' one raw-socket Kafka client: kio encodes and decodes the bodies, this module does headers and
framing, independently of the server's own codec (protocol.api), so a test of the wire checks the server against
Kafka's schemas rather than against itself.

Used by unit tests that talk to a server over a socket, by the raw-protocol e2e tests (in the test process: they
check the wire, not a client library) and by the benchmarks for round trips.

Request header: >h api_key, >h api_version, >i correlation_id, >h client_id length + bytes, then for
flexible versions (request header v2) one 0x00 byte of empty tagged fields. Response header: >i
correlation_id, plus one tagged-fields byte for flexible versions except ApiVersions (always header v0).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
import types
import typing
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_unsigned_varint
from kio.static.primitive import i32Timedelta, i64Timedelta

API_VERSIONS = 18

_writers: dict[type, Any] = {}
_readers: dict[type, Any] = {}


def _writer(cls: type) -> Any:
    w = _writers.get(cls)
    if w is None:
        w = _writers[cls] = entity_writer(cls)
    return w


def _reader(cls: type) -> Any:
    r = _readers.get(cls)
    if r is None:
        r = _readers[cls] = entity_reader(cls)
    return r


def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def encode_request(body: Any, correlation_id: int, client_id: str | None = "test") -> bytes:
    """A complete frame (length prefix included) for a kio request entity; `client_id` None is a null client id."""
    buf = io.BytesIO()
    buf.write(struct.pack(">hhi", body.__api_key__, body.__version__, correlation_id))
    if client_id is None:
        buf.write(struct.pack(">h", -1))
    else:
        cid = client_id.encode()
        buf.write(struct.pack(">h", len(cid)) + cid)
    if body.__flexible__:
        buf.write(b"\x00")
    _writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """-> (correlation_id, kio response entity)."""
    cls = response_class(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    offset = 4
    if cls.__flexible__ and api_key != API_VERSIONS:
        # response header v1: tagged fields (expected empty). Skip them generically.
        n, offset = _read_uvarint(frame, offset)
        for _ in range(n):
            _tag, offset = _read_uvarint(frame, offset)
            size, offset = _read_uvarint(frame, offset)
            offset += size
    body, consumed = _reader(cls)(frame, offset)  # kio readers return (value, bytes consumed)
    if offset + consumed != len(frame):
        raise ValueError(f"{cls.__name__}: {len(frame) - offset - consumed} trailing bytes after the body")
    return correlation_id, body


def _read_uvarint(buf: bytes, offset: int) -> tuple[int, int]:
    """-> (value, offset after it)."""
    value, size = read_unsigned_varint(buf, offset)
    return value, offset + size


class WireClient:
    """One blocking connection. `call(body)` sends one request and waits for its answer; `send` and `recv` are the
    two halves, for pipelining and for tests that look at what comes back (or does not)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "test") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._next_id = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, body: Any) -> int:
        """Send one request; its correlation id."""
        cid = self._next_id
        self._next_id += 1
        self.sock.sendall(encode_request(body, cid, self.client_id))
        return cid

    def recv(self, body: Any) -> tuple[int, Any]:
        """The next answer on the connection, read as the answer to `body`: (correlation id, entity)."""
        return decode_response(body.__api_key__, body.__version__, recv_frame(self.sock))

    def call(self, body: Any) -> Any:
        cid = self.send(body)
        got_cid, response = self.recv(body)
        if got_cid != cid:
            raise ValueError(f"correlation id {got_cid} in answer to request {cid}")
        return response

    request = call

    def request_raw(self, frame: bytes) -> bytes:
        """Send pre-encoded bytes and return the raw response frame (used by the bench for tight loops)."""
        self.sock.sendall(frame)
        return recv_frame(self.sock)


def make(cls: type, values: dict[str, Any]) -> Any:
    """Build a kio entity from a superset of values: fields the class lacks are ignored, nested entities are
    built from dicts, ints become the timedeltas kio uses for durations."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KeyError(f"{cls.__module__}.{cls.__qualname__} needs a value for {f.name}")
            continue
        value = values[f.name]
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and args:
            tp = args[0]
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None
        kind = f.metadata.get("kafka_type")
        if value is None:
            pass
        elif inner is not None and dataclasses.is_dataclass(inner):
            value = tuple(make(inner, v) for v in value)
        elif inner is not None:
            value = tuple(value)
        elif dataclasses.is_dataclass(tp):
            value = make(tp, value)
        elif kind == "timedelta_i32":
            value = i32Timedelta.parse(datetime.timedelta(milliseconds=value))
        elif kind == "timedelta_i64":
            value = i64Timedelta.parse(datetime.timedelta(milliseconds=value))
        kwargs[f.name] = value
    return cls(**kwargs)


def simple_commit(client: WireClient, group: str, topic: str, offsets: dict[int, int]) -> set[int]:
    """OffsetCommit v8 of a group without members (generation -1, no member id), as an admin tool commits:
    partition -> offset of one topic; the error codes of the answer's partitions."""
    answer = client.call(
        make(
            request_class(8, 8),
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                            for p, o in offsets.items()
                        ],
                    }
                ],
            },
        )
    )
    return {int(p.error_code) for t in answer.topics for p in t.partitions}


CONSUMER_RANGE = b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"  # a "range" subscription to no topic


def join_group(client: WireClient, group: str, member_id: str = "", reason: str | None = None) -> Any:
    """JoinGroup v9 of a consumer with the "range" protocol (session 10 s, rebalance 5 s); the answer."""
    return client.request(
        make(
            request_class(11, 9),
            {
                "group_id": group,
                "session_timeout": 10000,
                "rebalance_timeout": 5000,
                "member_id": member_id,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": CONSUMER_RANGE}],
                "reason": reason,
            },
        )
    )


def sync_alone(client: WireClient, group: str, generation: int, member_id: str) -> Any:
    """SyncGroup v5 of the leader of a group of one (an empty assignment for itself); the answer."""
    return client.request(
        make(
            request_class(14, 5),
            {
                "group_id": group,
                "generation_id": generation,
                "member_id": member_id,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": member_id, "assignment": b""}],
            },
        )
    )


def create_topics(host: str, port: int, topics: dict[str, int]) -> None:
    """Create topics (name -> partition count) with CreateTopics v5; one that exists already is fine. For the
    benches, which commit offsets to partitions that must exist (as in Kafka)."""
    body = make(
        request_class(19, 5),
        {
            "topics": [
                {"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
                for n, p in topics.items()
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    with WireClient(host, port, timeout=60) as client:
        answer = client.call(body)
    failed = [(t.name, t.error_code) for t in answer.topics if t.error_code not in (0, 36)]  # 36: exists
    if failed:
        raise RuntimeError(f"CreateTopics failed: {failed}")
