"""A tiny raw-socket Kafka client for tests: encode a request with kio, read the answer."""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol import api


def encode_request(request: Any, correlation_id: int, client_id: str | None = "test") -> bytes:
    return api.encode_request(request, correlation_id, client_id)


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    (correlation_id,) = struct.unpack_from(">i", payload, 0)
    return correlation_id, api.decode_response(api_key, version, payload, 4)


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
