"""The admin HTTP listener (aiohttp, on the server's event loop): /healthz, /readyz and /metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from .listener import Server


async def start(server: Server, host: str, port: int) -> tuple[Any, tuple[str, int]]:
    app = web.Application()

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if server.ready:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not ready"}, status=503)

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(server.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host or None, port, reuse_address=True)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    bound_port = sockets[0].getsockname()[1] if sockets else port
    return runner, (host, bound_port)
