"""Kafka error codes (kio's `ErrorCode`) and this package's own decode errors."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "ProtocolError", "FrameError", "RequestDecodeError", "UnknownApiKey"]


class ProtocolError(Exception):
    """Anything wrong with the bytes a peer sent. The connection that sent them is closed."""


class FrameError(ProtocolError):
    """A frame length that is negative or above `socket.request.max.bytes`."""


class RequestDecodeError(ProtocolError):
    """A request whose header or body cannot be decoded."""


class UnknownApiKey(ProtocolError):
    """An API key this server does not implement."""
