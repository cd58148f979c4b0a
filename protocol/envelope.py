"""Envelope (api key 58, v0): one request carried inside another, with who sent it.

Kafka's brokers wrap a client's request in an Envelope to forward it to the controller with the client's principal
and address. The workers of one machine use it the same way between themselves (coordinator.cluster.internal):
`request_data` is the client's request (header and body, without the length prefix), `client_host_address` the
client's IP address (4 or 16 bytes), `request_principal` whatever the two ends agree on. The answer's
`response_data` is the inner answer (header and body). Only the codec is here; who may send one is the caller's
business.
"""

from __future__ import annotations

import io
import ipaddress
import struct

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError

from .api import encode_request
from .errors import ErrorCode, RequestDecodeError

ENVELOPE = 58
_PREFIX = struct.Struct(">hhi")
_CID = struct.Struct(">i")
_read_request = entity_reader(EnvelopeRequest)
_read_response = entity_reader(EnvelopeResponse)
_write_response = entity_writer(EnvelopeResponse)


def host_bytes(host: str) -> bytes:
    """An IP address as Envelope carries it (4 or 16 bytes); b"" for anything that is not an address."""
    try:
        return ipaddress.ip_address(host.partition("%")[0]).packed
    except ValueError:
        return b""


def host_text(data: bytes) -> str:
    try:
        return str(ipaddress.ip_address(bytes(data))) if data else ""
    except ValueError:
        return ""


def encode_envelope(
    inner: bytes, correlation_id: int, principal: bytes, client_host: str, client_id: str | None = None
) -> bytes:
    """An Envelope request frame (with its length prefix) around `inner`, a request without its length prefix."""
    envelope = EnvelopeRequest(
        request_data=inner, request_principal=principal, client_host_address=host_bytes(client_host)
    )
    return encode_request(envelope, correlation_id, client_id)


def decode_envelope(frame: bytes | memoryview) -> tuple[int, EnvelopeRequest]:
    """(correlation id, the Envelope) of a request frame without its length prefix; RequestDecodeError if the
    frame is not an Envelope v0."""
    if len(frame) < _PREFIX.size:
        raise RequestDecodeError("a frame shorter than a request header")
    api_key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    if api_key != ENVELOPE or version != 0:
        raise RequestDecodeError(f"expected an Envelope v0, got api key {api_key} v{version}")
    try:
        offset = _PREFIX.size
        (length,) = struct.unpack_from(">h", frame, offset)
        offset += 2 + max(length, 0)  # client id
        offset += _skip_tags(frame, offset)
        envelope, _ = _read_request(frame, offset)
    except (DecodeError, ValueError, IndexError, struct.error, KeyError) as exc:
        raise RequestDecodeError(f"cannot decode an Envelope: {exc!r}") from exc
    return correlation_id, envelope


def _skip_tags(frame: bytes | memoryview, offset: int) -> int:
    if frame[offset] != 0:
        raise ValueError("tagged fields in an Envelope request header")
    return 1


def encode_envelope_response(correlation_id: int, inner: bytes | None, error_code: int = 0) -> bytes:
    """An Envelope answer (without its length prefix): header v1 and the inner answer (header and body)."""
    buf = io.BytesIO()
    buf.write(_CID.pack(correlation_id))
    buf.write(b"\x00")
    _write_response(buf, EnvelopeResponse(response_data=inner, error_code=ErrorCode(error_code)))
    return buf.getvalue()


def decode_envelope_response(payload: bytes | memoryview) -> tuple[int, bytes | None]:
    """(error code, inner answer) of an Envelope answer from after its correlation id."""
    if payload[0] != 0:
        raise ValueError("unexpected tagged fields in an Envelope response header")
    response, _ = _read_response(payload, 1)
    return int(response.error_code), response.response_data
