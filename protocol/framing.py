"""Kafka's size-delimited framing: a 4-byte big-endian signed length, then that many bytes."""

import struct

from .errors import FrameError

_LEN = struct.Struct(">i")

DEFAULT_MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes


def frame_length(prefix: bytes, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> int:
    """Decode and bound a frame's length prefix. Kafka rejects negative sizes and sizes above the maximum."""
    (size,) = _LEN.unpack(prefix)
    if size < 0:
        raise FrameError(f"negative frame size {size}")
    if size > max_bytes:
        raise FrameError(f"frame size {size} exceeds socket.request.max.bytes={max_bytes}")
    return size


def frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload
