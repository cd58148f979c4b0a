"""The admin HTTP API's guard: once security is configured (a listener other than PLAINTEXT, or an authorizer),
requests that change state (POST, PUT, PATCH, DELETE) need `Authorization: Bearer <admin.auth.token>` or, when the
admin listener serves TLS (`admin.ssl.enabled`), a client certificate verified against the truststore. Reads
(GET, HEAD: /healthz, /readyz, /metrics, /v1 views) stay open, as scrapers and probes expect.

Without a token configured and without a verified certificate, mutating requests are refused (403), so turning on
security never leaves the write endpoints open by omission. The token is compared in constant time.
"""

from __future__ import annotations

import hmac
from typing import Any

from aiohttp import web

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def admin_auth_middleware(security: Any) -> Any:
    token = str(security.config["admin.auth.token"])

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method in SAFE_METHODS or not security.configured:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, offered = header.partition(" ")
        if (
            token
            and scheme.lower() == "bearer"
            and hmac.compare_digest(offered.strip().encode(), token.encode())
        ):
            return await handler(request)
        transport = request.transport
        if transport is not None and transport.get_extra_info("peercert"):
            return await handler(request)  # verified by the TLS handshake against the truststore
        status = 401 if not header else 403
        return web.json_response(
            {
                "error": "unauthorized",
                "message": "this endpoint needs `Authorization: "
                "Bearer <admin.auth.token>` or a verified client certificate",
            },
            status=status,
        )

    return guard


def admin_ssl_context(security: Any) -> Any:
    """The admin listener's TLS context when `admin.ssl.enabled` (the Kafka listeners' keystore and truststore,
    client certificates requested), else None."""
    if not security.config["admin.ssl.enabled"]:
        return None
    import ssl

    from .listeners import server_ssl_context

    ctx = server_ssl_context(security.config)
    if ctx.verify_mode == ssl.CERT_NONE and (
        security.config["ssl.truststore.location"] or security.config["ssl.truststore.certificates"]
    ):
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
