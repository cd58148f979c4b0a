"""The channel between the workers of `serve --workers N`: who sent a relayed request, and that a worker sent it.

Every worker has an internal Kafka listener on 127.0.0.1 (bound by the supervisor, like the others), and every
request one worker sends another (a group request relayed to its owner, a data-plane or security request
forwarded to worker 0, the security state pushed to the others) goes there inside an Envelope (api key 58,
protocol.envelope), as Kafka's brokers forward requests to their controller:

* `request_principal` is JSON: the run's secret (a random token the supervisor gives every worker in its spec,
  never on disk), the client's principal, the name of the listener the client came in on and the address it
  reached there, and the kind of message (`request`, or the security part's `hello` / `sync`).
* `client_host_address` is the client's IP address, so the receiver authorizes (ACL host rules) and describes
  (DescribeGroups' client host) the real client, not the relaying worker.
* `request_data` is the client's request, header and body, as the client's connection decoded it.

The receiving worker checks the secret (constant time; a wrong one closes the connection), then handles the inner
request exactly as if the client had sent it on the named listener: same principal (the authorizer runs again,
with the ACLs every worker holds), same client host, and that listener's addresses in any broker address it
answers. Nothing but Envelope is accepted on an internal listener, and no client listener accepts Envelope (it is
not in the API table), so a client cannot claim a principal. A worker's own requests (the forwarder's log-end
refresh) carry INTERNAL_PRINCIPAL, a principal type no authentication produces, which every worker's authorizer
takes as a super user.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.brokers import local_address
from coordinator.security.sasl import SecuritySession
from protocol.api import ApiSpec, ApiTable, DecodedRequest, RequestContext
from protocol.envelope import (
    ENVELOPE,
    decode_envelope,
    encode_envelope,
    encode_envelope_response,
    host_text,
)
from protocol.errors import RequestDecodeError

log = logging.getLogger(__name__)

INTERNAL_PRINCIPAL = "KgcWorker:internal"
INTERNAL_LISTENER = "KGC_INTERNAL"
REQUEST, HELLO, SYNC = "request", "hello", "sync"

# A kind's handler: (the principal JSON, the request data) -> the answer's data.
KindHandler = Callable[[dict[str, Any], bytes], Awaitable[bytes]]


def new_secret() -> str:
    return secrets.token_hex(32)


@dataclasses.dataclass(frozen=True, slots=True)
class Origin:
    """Who sent a request a worker relays: the client's principal and address, the listener it came in on (None:
    the primary one) and the local address it reached there."""

    principal: str
    client_host: str
    listener: str | None = None
    local_host: str | None = None


def origin_of(ctx: RequestContext) -> Origin:
    local = local_address.get(None)
    return Origin(
        ctx.principal,
        ctx.client_host,
        getattr(ctx.session, "listener_name", None),
        local[0] if local is not None else None,
    )


WORKER_ORIGIN = Origin(INTERNAL_PRINCIPAL, "127.0.0.1")


class InternalChannel:
    """Both ends of the channel for one worker: the envelopes it sends and the ones its internal listener takes."""

    def __init__(self, secret: str, listeners: Callable[[str | None], tuple[str, int, str] | None]) -> None:
        """`listeners(name)`: (host, bound port, security protocol) of this worker's listener `name` (None: the
        primary one), or None when it has no such listener."""
        self._secret = secret
        self._listeners = listeners
        self.kinds: dict[str, KindHandler] = {}

    @property
    def secret(self) -> str:
        return self._secret

    # -- sending ------------------------------------------------------------------------------------

    def envelope(
        self, inner: bytes, correlation_id: int, origin: Origin, kind: str = REQUEST, **extra: Any
    ) -> bytes:
        """`inner` (a request without its length prefix) as an Envelope frame from `origin`."""
        principal = {
            "secret": self._secret,
            "kind": kind,
            "principal": origin.principal,
            "listener": origin.listener,
            "local": origin.local_host,
            **extra,
        }
        return encode_envelope(
            inner, correlation_id, json.dumps(principal).encode(), origin.client_host, "kgc-worker"
        )

    # -- receiving ----------------------------------------------------------------------------------

    def unwrap(self, frame: bytes | memoryview, table: ApiTable, connection_id: int) -> DecodedRequest:
        """The request inside an Envelope frame, with the client's principal, host and listener; raises a
        ProtocolError (the connection closes) for anything else or a wrong secret."""
        correlation_id, envelope = decode_envelope(frame)
        try:
            meta = json.loads(envelope.request_principal or b"")
            secret = meta["secret"]
        except (ValueError, TypeError, KeyError) as exc:
            raise RequestDecodeError("an Envelope without the workers' principal data") from exc
        if not isinstance(secret, str) or not hmac.compare_digest(secret, self._secret):
            raise RequestDecodeError("an Envelope with a wrong secret")
        kind = meta.get("kind")
        client_host = host_text(envelope.client_host_address)
        if kind != REQUEST:
            handler = self.kinds.get(kind)  # type: ignore[arg-type]
            if handler is None:
                raise RequestDecodeError(f"an Envelope of unknown kind {kind!r}")
            ctx = RequestContext(ENVELOPE, 0, correlation_id, "kgc-worker", client_host, connection_id)
            ctx.principal = INTERNAL_PRINCIPAL
            data = bytes(envelope.request_data)
            spec = ApiSpec(ENVELOPE, 0, 0, lambda _ctx, _body: _answer(handler, meta, data))
            return DecodedRequest(ctx, data, spec, envelope=correlation_id)
        decoded = table.decode(envelope.request_data, client_host, connection_id)
        listener = self._listeners(meta.get("listener"))
        if listener is not None:
            host, port, protocol = listener
            local_host = meta.get("local") or host
            local_address.set((local_host, port))  # broker addresses answered for the client's listener
        else:
            protocol = "PLAINTEXT"
        principal = str(meta.get("principal") or "User:ANONYMOUS")
        session = SecuritySession(meta.get("listener") or "PLAINTEXT", protocol, principal)
        session.authenticated = True
        decoded.context.principal = principal
        decoded.context.session = session
        decoded.context.relayed = True
        decoded.envelope = correlation_id
        return decoded

    @staticmethod
    def wrap(decoded: DecodedRequest, payload: bytes) -> bytes:
        """The inner answer (header and body) as the Envelope's answer."""
        return encode_envelope_response(decoded.envelope, payload)


async def _answer(handler: KindHandler, meta: dict[str, Any], data: bytes) -> bytes:
    """A kind handler's answer; a failure is answered `error: ...` (the sender treats it as one), never as a
    Kafka error response the sender would not expect."""
    try:
        return await handler(meta, data)
    except Exception as exc:  # noqa: BLE001 - any failure is the sender's to see
        log.exception("internal %s message failed", meta.get("kind"))
        return f"error: {exc!r}".encode()
