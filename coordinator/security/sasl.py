"""A connection's security session and the SASL APIs: SaslHandshake (17, v0-1) and SaslAuthenticate (36, v0-2).

Every connection gets a `SecuritySession` from its listener. Its principal starts as `User:ANONYMOUS` (or the
client certificate's `User:<DN>` on SSL listeners) and, on SASL listeners, becomes `User:<name>` once the client
authenticates. Until then the session lets only ApiVersions, SaslHandshake and SaslAuthenticate through; the
connection closes on anything else, as Kafka's SaslServerAuthenticator does ("Unexpected Kafka request of type
... during SASL handshake").

The exchange, as Kafka runs it with handshake v1: SaslHandshake names a mechanism (UNSUPPORTED_SASL_MECHANISM and
the enabled list if it is not enabled, then the connection is closed), then SaslAuthenticate requests carry the
mechanism's messages (PLAIN: one; SCRAM: client-first, client-final). A failed exchange answers
SASL_AUTHENTICATION_FAILED with Kafka's message and closes the connection after the answer is written. On a
non-SASL listener, or after authentication, both APIs answer ILLEGAL_SASL_STATE (Kafka's KafkaApis does).

SaslHandshake v0 is advertised, as Kafka does, but not served: after a v0 handshake Kafka reads the mechanism's
tokens as bare length-prefixed frames instead of SaslAuthenticate requests, which this server does not implement
(every client since Kafka 1.0 sends v1 and SaslAuthenticate). A v0 handshake answers UNSUPPORTED_VERSION and the
connection is closed. It is advertised because librdkafka enables SASL only when the range includes v0 (its "SASL
handshake" feature: librdkafka 2.0.2, the one Debian's kcat links, refuses SCRAM without it) and then sends v1.
Not implemented either: re-authentication (KIP-368: the session lifetime answered is 0, so clients never
re-authenticate).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from protocol.api import RequestContext
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from .acl import ANONYMOUS
from .scram import PLAIN, AuthenticationFailed, ScramCredential, ScramServer, plain_authenticate

log = logging.getLogger(__name__)

PRE_AUTH_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# api key -> (min version, max version) of the SASL APIs served here.
VERSIONS: dict[ApiKey, tuple[int, int]] = {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)}


class SecuritySession:
    """One connection's authentication state (see the module doc)."""

    def __init__(self, listener_name: str, protocol: str, principal: str | None = None) -> None:
        self.listener_name = listener_name
        self.protocol = protocol
        self.sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        self.principal = principal or ANONYMOUS
        self.authenticated = not self.sasl
        self.mechanism: str | None = None
        self.exchange: Any = None
        self.close_after_response = (
            False  # set by a failed exchange: the connection closes once it is answered
        )

    def allows(self, api_key: int) -> bool:
        return self.authenticated or api_key in PRE_AUTH_APIS


class SaslApis:
    """The two SASL handlers; `lookup(mechanism, user)` gives a SCRAM credential or None."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        lookup: Callable[[str, str], ScramCredential | None],
        check_plain: Callable[[str, str], bool],
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.mechanisms = tuple(mechanisms)
        self._lookup = lookup
        self._check_plain = check_plain
        self._on_failure = on_failure

    def register(self, table: Any) -> None:
        handlers = {ApiKey.SASL_HANDSHAKE: self.handshake, ApiKey.SASL_AUTHENTICATE: self.authenticate}
        for api_key, (low, high) in VERSIONS.items():
            table.register(api_key, low, high, handlers[api_key])

    async def handshake(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        session: SecuritySession | None = ctx.session
        answer = {"mechanisms": self.mechanisms}
        if ctx.api_version == 0:  # unframed tokens would follow: not served (see the module doc)
            if session is not None:
                session.close_after_response = True
            return answer | {"error_code": ErrorCode.unsupported_version}
        if session is None or not session.sasl or session.authenticated or session.mechanism is not None:
            return answer | {"error_code": ErrorCode.illegal_sasl_state}
        if request.mechanism not in self.mechanisms:
            session.close_after_response = True
            return answer | {"error_code": ErrorCode.unsupported_sasl_mechanism}
        session.mechanism = request.mechanism
        if request.mechanism != PLAIN:
            mechanism = request.mechanism
            session.exchange = ScramServer(mechanism, lambda user: self._lookup(mechanism, user))
        return answer | {"error_code": ErrorCode.none}

    async def authenticate(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        session: SecuritySession | None = ctx.session
        if session is None or not session.sasl or session.authenticated or session.mechanism is None:
            return _auth(
                ErrorCode.illegal_sasl_state,
                "Unexpected SaslAuthenticate request: no SASL handshake in progress on this connection",
            )
        try:
            if session.mechanism == PLAIN:
                user = plain_authenticate(bytes(request.auth_bytes), self._check_plain)
                self._done(session, user)
                return _auth(ErrorCode.none, None)
            exchange: ScramServer = session.exchange
            reply = exchange.step(bytes(request.auth_bytes))
            if exchange.complete:
                assert exchange.username is not None
                self._done(session, exchange.username)
            return _auth(ErrorCode.none, None, reply)
        except AuthenticationFailed as exc:
            session.close_after_response = True
            log.info(
                "SASL %s authentication failed on connection %d from %s",
                session.mechanism,
                ctx.connection_id,
                ctx.client_host,
            )
            if self._on_failure is not None:
                self._on_failure(session.mechanism)
            return _auth(ErrorCode.sasl_authentication_failed, str(exc))

    @staticmethod
    def _done(session: SecuritySession, user: str) -> None:
        session.principal = "User:" + user
        session.authenticated = True
        session.exchange = None


def _auth(code: ErrorCode, message: str | None, reply: bytes = b"") -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": reply, "session_lifetime": 0}
