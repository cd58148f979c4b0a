"""The API table: api key -> (min version, max version, handler), and the request/response codec around it.

ApiVersions is derived from the table, so what is advertised is exactly what has a handler. A request is decoded in
three steps: the fixed prefix (api key, version, correlation id), the header (v1, or v2 for flexible versions), then
the body with kio's native reader for that exact version. Responses get header v0, or v1 for flexible versions,
except ApiVersions, whose response header is always v0 so a client that probed with too new a version can still
read the answer.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError
from kio.static.constants import EntityType
from kio.static.primitive import i16

from .api_keys import ApiKey
from .build import build, fields_of
from .errors import ErrorCode, RequestDecodeError, UnknownApiKey
from .shape import array_check, strip_header_tags, strip_unknown_tags

_PREFIX = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclasses.dataclass(slots=True)
class RequestContext:
    """What a handler knows about a request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""
    connection_id: int = 0
    # Who sent it: Kafka's principal string ("User:ANONYMOUS" until TLS or SASL says otherwise), and the
    # connection's security session (SASL state), set by the connection before the handler runs.
    principal: str = "User:ANONYMOUS"
    session: Any = None
    # Relayed here by another coordinator on the client's behalf (an Envelope, coordinator.cluster.internal): this
    # server answers it, and never relays it on.
    relayed: bool = False


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    # Passed on undecoded (a front's forwarding to an upstream broker): the handler gets the request frame itself
    # as the body and answers the encoded answer (bytes from the correlation id on).
    raw: bool = False


@dataclasses.dataclass(slots=True)
class DecodedRequest:
    context: RequestContext
    body: Any  # the kio request entity; None when the version is unsupported
    spec: ApiSpec
    envelope: Any = (
        None  # the Envelope it came in (coordinator.cluster.internal): its answer goes back in one
    )


@functools.cache
def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


def _check_known(api_key: int, version: int) -> None:
    """Raise UnknownAPIKey or UnknownEntity unless kio has both schemas of this API version, from kio's index
    alone: the schema modules are imported when a request of that version first comes (importing all of them
    at start, ~370 modules, was most of a worker's start-up time)."""
    name = api_key_map.get(api_key)
    if name is None:
        raise UnknownAPIKey(f"kio knows no API with key {api_key}")
    kinds = schema_name_map.get(name, {}).get(version, {})
    if EntityType.request not in kinds or EntityType.response not in kinds:
        raise UnknownEntity(f"kio has no {name} v{version}")


@functools.cache
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


@functools.cache
def _decoding(api_key: int, version: int) -> tuple[Any, Any, Any, Any]:
    """A request version's class, its header's reader, its array check and its body's reader: one lookup per
    request instead of four."""
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    return cls, _reader(header_cls), array_check(cls), _reader(cls)


def decode_request_body(frame: bytes | memoryview) -> Any:
    """The body of a whole request frame (header first), of any API and version kio knows, whatever a table
    serves: for a part that looks into a request it passes on undecoded. Raises RequestDecodeError."""
    if len(frame) < _PREFIX.size:
        raise RequestDecodeError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, version, _ = _PREFIX.unpack_from(frame, 0)
    try:
        _, body = _read_request(frame, api_key, version)
    except (DecodeError, ValueError, OverflowError, KeyError, UnknownAPIKey, UnknownEntity) as exc:
        raise RequestDecodeError(f"cannot decode api key {api_key} v{version}: {exc!r}") from exc
    return body


def _read_request(frame: bytes | memoryview, api_key: int, version: int) -> tuple[Any, Any]:
    """The header and body of a request frame of a version kio knows, tagged fields kio does not know skipped
    (as Kafka skips them: protocol.shape). Raises what kio's readers raise."""
    cls, read_header, check, read_body = _decoding(api_key, version)
    try:
        header, offset = read_header(frame, 0)
    except KeyError:  # a tagged field kio does not know
        frame = strip_header_tags(frame) or frame
        header, offset = read_header(frame, 0)
    if check is not None:
        check(frame, offset)  # before kio's reader, which trusts claimed array lengths (protocol.shape)
    try:
        body, _ = read_body(frame, offset)
    except KeyError:
        stripped = strip_unknown_tags(cls, frame, offset)
        if stripped is None:
            raise
        body, _ = read_body(stripped, offset)
    return header, body


@functools.cache
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


def encode_request(body: Any, correlation_id: int, client_id: str | None) -> bytes:
    """A request frame as a client sends it (length prefix, header v1 or v2, body) for a kio request entity: for
    relaying a request to another server (coordinator.cluster), tests and tools."""
    cls: Any = type(body)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(_PREFIX.pack(body.__api_key__, body.__version__, correlation_id))
    if client_id is None:
        buf.write(b"\xff\xff")
    else:
        raw = client_id.encode()
        buf.write(struct.pack(">h", len(raw)))
        buf.write(raw)
    if cls.__flexible__:
        buf.write(b"\x00")  # request header v2: no tagged fields
    _writer(cls)(buf, body)
    data = buf.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


class Encoded:
    """A response body already encoded for the request's exact version (made by encode_body, kept by a handler
    that answers the same thing again and again, e.g. Metadata); ApiTable.encode_response only adds the
    header. Only answers without errors are kept this way: `error_code` is what request metrics read."""

    __slots__ = ("body",)
    error_code = 0

    def __init__(self, body: bytes) -> None:
        self.body = body

    def decode(self, api_key: int, version: int) -> Any:
        """The entity again (for a wrapper that edits the answer, e.g. the authorizer filtering topics)."""
        entity, _ = _reader(response_class(api_key, version))(self.body, 0)
        return entity


def encode_body(api_key: int, version: int, response: Any) -> Encoded:
    """`response` (an entity of any version, or a mapping) encoded as `version`'s body, without a header."""
    cls = response_class(api_key, version)
    buf = io.BytesIO()
    _writer(cls)(buf, build(cls, response))
    return Encoded(buf.getvalue())


def decode_response(api_key: int, version: int, payload: bytes | memoryview, offset: int = 0) -> Any:
    """The response entity in `payload` from `offset`, where its header continues after the correlation id."""
    cls = response_class(api_key, version)
    if cls.__flexible__ and api_key != ApiKey.API_VERSIONS:
        # Response header v1: tagged fields (none are defined; skip a count of zero, refuse others).
        if payload[offset] != 0:
            raise ValueError("unexpected tagged fields in a response header")
        offset += 1
    body, _ = _reader(cls)(payload, offset)
    return body


class ApiTable:
    def __init__(self) -> None:
        self._specs: dict[int, ApiSpec] = {}
        self.register(ApiKey.API_VERSIONS, 0, 4, self._api_versions)

    def register(self, api_key: int, min_version: int, max_version: int, handler: Handler) -> None:
        for v in range(min_version, max_version + 1):
            _check_known(api_key, v)  # fail at start-up, not on the first request, if kio lacks a version
        self._specs[api_key] = ApiSpec(api_key, min_version, max_version, handler)

    def register_raw(self, api_key: int, min_version: int, max_version: int, handler: Handler) -> None:
        """An API whose requests are not decoded (see ApiSpec.raw); any key and version, known to kio or not."""
        self._specs[api_key] = ApiSpec(api_key, min_version, max_version, handler, raw=True)

    def narrow(self, api_key: int, min_version: int, max_version: int) -> None:
        """Serve a registered API at these versions only (what an upstream cluster serves too)."""
        spec = self._specs[api_key]
        self._specs[api_key] = dataclasses.replace(spec, min_version=min_version, max_version=max_version)

    def unregister(self, api_key: int) -> None:
        self._specs.pop(api_key, None)

    def wrap(self, api_key: int, wrapper: Callable[[Handler], Handler]) -> None:
        """Put a layer in front of a registered handler (authorization): the spec keeps its version range and
        gets `wrapper(old_handler)`. Unregistered keys are left alone."""
        spec = self._specs.get(api_key)
        if spec is not None:
            self._specs[api_key] = dataclasses.replace(spec, handler=wrapper(spec.handler))

    def spec(self, api_key: int) -> ApiSpec | None:
        return self._specs.get(api_key)

    def specs(self) -> list[ApiSpec]:
        return sorted(self._specs.values(), key=lambda s: s.api_key)

    # -- decoding ---------------------------------------------------------------------------------

    def decode(
        self, frame: bytes | memoryview, client_host: str = "", connection_id: int = 0
    ) -> DecodedRequest:
        """Decode one request frame (without its length prefix).

        Raises UnknownApiKey for keys not in the table and RequestDecodeError for anything malformed. A version
        outside the table's range decodes to a DecodedRequest with body None: the caller answers
        UNSUPPORTED_VERSION (see `unsupported_version_response`).
        """
        if len(frame) < _PREFIX.size:
            raise RequestDecodeError(f"request of {len(frame)} bytes is shorter than a request header")
        api_key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
        spec = self._specs.get(api_key)
        if spec is None:
            raise UnknownApiKey(f"unknown api key {api_key}")
        ctx = RequestContext(api_key, version, correlation_id, None, client_host, connection_id)
        if not spec.min_version <= version <= spec.max_version:
            return DecodedRequest(ctx, None, spec)
        if spec.raw:
            # Header v1 and v2 both begin with the client id as a (non-compact) nullable string.
            if len(frame) < _PREFIX.size + 2:
                raise RequestDecodeError(f"request of {len(frame)} bytes is shorter than a request header")
            (length,) = _I16.unpack_from(frame, _PREFIX.size)
            if length >= 0:
                start = _PREFIX.size + 2
                if start + length > len(frame):
                    raise RequestDecodeError("the client id runs past the end of the request")
                ctx.client_id = bytes(frame[start : start + length]).decode("utf-8", "replace")
            return DecodedRequest(ctx, frame, spec)
        try:
            header, body = _read_request(frame, api_key, version)
        except (DecodeError, ValueError, OverflowError, KeyError) as exc:
            raise RequestDecodeError(f"cannot decode api key {api_key} v{version}: {exc!r}") from exc
        ctx.client_id = header.client_id
        return DecodedRequest(ctx, body, spec)

    # -- encoding ---------------------------------------------------------------------------------

    def encode_response(self, ctx: RequestContext, response: Any) -> bytes:
        """Encode a response (header + body) for the request's version. `response` may be an entity of another
        version or a mapping: it is rebuilt as the exact version's class; or an Encoded body, sent as it is."""
        if isinstance(response, Encoded):
            flexible = (
                response_class(ctx.api_key, ctx.api_version).__flexible__
                and ctx.api_key != ApiKey.API_VERSIONS
            )
            return _I32.pack(ctx.correlation_id) + (b"\x00" if flexible else b"") + response.body
        seen = (id(response), ctx.api_key, ctx.api_version)
        known = _ENCODED.get(seen)
        if known is not None and known[0] is response:  # this very answer again (held by the entry: same id)
            return _I32.pack(ctx.correlation_id) + known[1]
        if isinstance(response, Hashable) and (
            ctx.api_key == ApiKey.HEARTBEAT
            or (ctx.api_key == ApiKey.OFFSET_COMMIT and _few_partitions(response))
        ):
            # Encoded once per version and answer. A heartbeat's is the most frequent answer there is, and one of a
            # handful (coordinator.group.responses caches them); a consumer commits the same few partitions again
            # and again, and the answer names them with their errors only (a tenth of a pipelined commit's CPU).
            # Those answers are themselves made once and given again, so the same object is found by identity
            # first, without hashing it (a frozen entity's hash walks all its fields, in Python).
            try:
                body = _reused_body(ctx.api_key, ctx.api_version, response)
            except TypeError:  # a field holds a list: not hashable, encoded below as any answer
                pass
            else:
                if len(_ENCODED) >= _ENCODED_ANSWERS:
                    _ENCODED.clear()
                _ENCODED[seen] = (response, body)
                return _I32.pack(ctx.correlation_id) + body
        if ctx.api_key == ApiKey.API_VERSIONS and isinstance(response, ApiVersionsResponseV0):
            cls: Any = ApiVersionsResponseV0
        else:
            cls = response_class(ctx.api_key, ctx.api_version)
        return _I32.pack(ctx.correlation_id) + _encode_body(cls, ctx.api_key, response)

    def unsupported_version_response(self, ctx: RequestContext) -> Any | None:
        """The answer to a request whose version is outside the table's range, or None to close the connection.

        ApiVersions answers a v0-shaped body with UNSUPPORTED_VERSION and our ranges (KIP-511), whatever version
        was asked. Other APIs answer UNSUPPORTED_VERSION in the top-level error code when kio knows that version
        and the response has one; otherwise the connection is closed, as Kafka does for requests it cannot parse.
        """
        if ctx.api_key == ApiKey.API_VERSIONS:
            return ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=self._api_keys())
        return self.error_response(ctx, ErrorCode.unsupported_version)

    def error_response(self, ctx: RequestContext, code: ErrorCode) -> Any | None:
        """A response of the request's version carrying `code` in its top-level error code, or None when that
        response has no top-level error code (the caller then closes the connection)."""
        try:
            cls = response_class(ctx.api_key, ctx.api_version)
        except (UnknownAPIKey, UnknownEntity):
            return None
        if "error_code" not in fields_of(cls):
            return None
        return build(cls, error_code=code)

    # -- ApiVersions ------------------------------------------------------------------------------

    def _api_keys(self) -> tuple[ApiVersionV0, ...]:
        return tuple(
            ApiVersionV0(
                api_key=i16(s.api_key), min_version=i16(s.min_version), max_version=i16(s.max_version)
            )
            for s in self.specs()
        )

    async def _api_versions(self, ctx: RequestContext, request: Any) -> Any:
        return {
            "error_code": ErrorCode.none,
            "api_keys": [
                {"api_key": s.api_key, "min_version": s.min_version, "max_version": s.max_version}
                for s in self.specs()
            ],
            "throttle_time": 0,
            "supported_features": (),
            "finalized_features_epoch": -1,
            "finalized_features": (),
            "zk_migration_ready": False,
        }


def _encode_body(cls: Any, api_key: int, response: Any) -> bytes:
    """A response's header tags (if flexible) and body, as version class `cls`."""
    body = build(cls, response)
    buf = io.BytesIO()
    if cls.__flexible__ and api_key != ApiKey.API_VERSIONS:
        buf.write(b"\x00")  # response header v1: empty tagged fields
    _writer(cls)(buf, body)
    return buf.getvalue()


@functools.lru_cache(maxsize=1024)
def _reused_body(api_key: int, version: int, response: Hashable) -> bytes:
    """The encoded body of an answer that comes back again and again (Heartbeat, a few partitions' OffsetCommit)."""
    return _encode_body(response_class(api_key, version), api_key, response)


CACHED_COMMIT_PARTITIONS = 32  # OffsetCommit answers naming more partitions are encoded each time

# (id(answer), api key, version) -> (the answer, its encoded body), for the answers _reused_body encodes: the entry
# holds the answer, so while it is here no other object has its id.
_ENCODED: dict[tuple[int, int, int], tuple[Any, bytes]] = {}
_ENCODED_ANSWERS = 4096


def _few_partitions(response: Any) -> bool:
    topics = getattr(response, "topics", None)
    if topics is None:
        return False
    count = 0
    for topic in topics:
        count += len(topic.partitions)
        if count > CACHED_COMMIT_PARTITIONS:
            return False
    return True
