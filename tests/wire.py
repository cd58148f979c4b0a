"""A tiny raw-socket Kafka client for tests: encode a request with kio, read the answer."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from protocol.api import response_class


def encode_request(request: Any, correlation_id: int, client_id: str | None = "test") -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">hhi", request.__api_key__, request.__version__, correlation_id))
    if client_id is None:
        buf.write(struct.pack(">h", -1))
    else:
        raw = client_id.encode()
        buf.write(struct.pack(">h", len(raw)) + raw)
    if type(request).__flexible__:
        buf.write(b"\x00")
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    (correlation_id,) = struct.unpack_from(">i", payload, 0)
    cls = response_class(api_key, version)
    offset = 4
    if cls.__flexible__ and api_key != 18:
        offset += 1  # empty tagged fields of response header v1
    body, _ = entity_reader(cls)(payload, offset)
    return correlation_id, body


def recv_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation = 0

    def send(self, request: Any) -> int:
        self._correlation += 1
        self.sock.sendall(encode_request(request, self._correlation))
        return self._correlation

    def recv(self, request: Any) -> tuple[int, Any]:
        return decode_response(request.__api_key__, request.__version__, recv_frame(self.sock))

    def call(self, request: Any) -> Any:
        correlation = self.send(request)
        got, body = self.recv(request)
        assert got == correlation
        return body

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
