"""Worker 0's admin listener fronts the other workers of `serve --workers N` (coordinator.cluster).

Every worker other than 0 has an internal admin listener on 127.0.0.1. Worker 0 proxies /v1/groups/{group}... for
groups it does not own to the owner, merges /v1/groups and /v1/coordinator, reports /readyz ready only when every
worker is, and serves every worker's /metrics series with a `worker` label.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from coordinator.cluster.topology import Topology


class AdminPeers:
    """Worker 0's admin listener in front of the others' internal ones (see the module doc)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.peers = topology.peer_admin_urls()
        self._session: Any = None

    def session(self) -> Any:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _get(self, url: str) -> tuple[int, bytes, str]:
        async with self.session().get(url) as resp:
            return resp.status, await resp.read(), resp.headers.get("Content-Type", "")

    @property
    def middleware(self) -> Callable[..., Awaitable[Any]]:
        @web.middleware
        async def peers(request: web.Request, handler: Any) -> web.StreamResponse:
            path = request.path
            if path == "/readyz":
                return await self._readyz(request, handler)
            if path == "/metrics":
                return await self._metrics(request, handler)
            if path == "/v1/groups":
                return await self._list_groups(request, handler)
            if path == "/v1/coordinator":
                return await self._coordinator(request, handler)
            if path.startswith("/v1/groups/"):
                group_id = (
                    urllib.parse.unquote(request.match_info.get("group", ""))
                    if "group" in request.match_info
                    else None
                )
                if group_id:
                    owner = self.topology.owner(group_id)
                    if owner != self.topology.index:
                        return await self._proxy(request, owner)
            return await handler(request)

        return peers

    async def _proxy(self, request: Any, owner: int) -> Any:
        url = self.peers[owner] + request.raw_path
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        try:
            async with self.session().request(
                request.method,
                url,
                data=body or None,
                headers=headers,
                # A pause or resume waits up to its timeout_ms for the members to sync (admin.http).
                timeout=aiohttp.ClientTimeout(total=_proxy_timeout_s(request)),
            ) as resp:
                payload = await resp.read()
                return web.Response(
                    body=payload, status=resp.status, content_type=resp.content_type or "application/json"
                )
        except (TimeoutError, OSError, Exception) as exc:  # noqa: B014 - aiohttp's errors are OSErrors
            if isinstance(exc, asyncio.CancelledError):
                raise
            return web.json_response(
                {"error": "COORDINATOR_NOT_AVAILABLE", "message": f"worker {owner} does not answer: {exc}"},
                status=503,
            )

    async def _readyz(self, request: Any, handler: Any) -> Any:
        local = await handler(request)
        if local.status != 200:
            return local
        for w, url in self.peers.items():
            try:
                status, _, _ = await self._get(url + "/readyz")
            except Exception:  # noqa: BLE001 - a worker that does not answer is not ready
                status = 0
            if status != 200:
                return web.json_response({"status": "not ready", "worker": w}, status=503)
        return local

    async def _list_groups(self, request: Any, handler: Any) -> Any:
        local = await handler(request)
        if local.status != 200:
            return local
        groups = list(json.loads(local.body)["groups"])
        query = request.rel_url.query_string
        for w, url in self.peers.items():
            try:
                status, payload, _ = await self._get(url + "/v1/groups" + ("?" + query if query else ""))
            except Exception as exc:  # noqa: BLE001
                return web.json_response(
                    {"error": "COORDINATOR_NOT_AVAILABLE", "message": f"worker {w} does not answer: {exc}"},
                    status=503,
                )
            if status != 200:
                return web.Response(body=payload, status=status, content_type="application/json")
            groups.extend(json.loads(payload)["groups"])
        groups.sort(key=lambda g: str(g.get("group_id", g.get("group", ""))))
        return web.json_response({"groups": groups})

    async def _coordinator(self, request: Any, handler: Any) -> Any:
        """Every worker's status; a worker that does not answer is listed with its error."""
        local = await handler(request)
        workers = list(json.loads(local.body)["workers"])
        for w, url in self.peers.items():
            try:
                status, payload, _ = await self._get(url + "/v1/coordinator")
                if status != 200:
                    raise OSError(f"HTTP {status}")
                workers.extend(json.loads(payload)["workers"])
            except Exception as exc:  # noqa: BLE001 - shown on the page, not raised
                workers.append({"worker": w, "error": f"worker {w} does not answer: {exc}"})
        workers.sort(key=lambda s: int(s.get("worker", 0)))
        return web.json_response({"workers": workers})

    async def _metrics(self, request: Any, handler: Any) -> Any:
        local = await handler(request)
        texts = {self.topology.index: local.body.decode()}
        for w, url in self.peers.items():
            with contextlib.suppress(Exception):  # a restarting worker's series are missing for a scrape
                status, payload, _ = await self._get(url + "/metrics")
                if status == 200:
                    texts[w] = payload.decode()
        return web.Response(body=merge_expositions(texts), headers={"Content-Type": CONTENT_TYPE_LATEST})


def merge_expositions(texts: dict[int, str]) -> bytes:
    """Prometheus text expositions of several workers as one: every sample gets a `worker` label, and families
    of the same name are merged (one HELP/TYPE each), as a valid exposition requires."""
    families: dict[str, Metric] = {}
    for worker in sorted(texts):
        for family in text_string_to_metric_families(texts[worker]):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            for s in family.samples:
                merged.samples.append(
                    Sample(s.name, {**s.labels, "worker": str(worker)}, s.value, s.timestamp, s.exemplar)
                )

    class _Merged:
        def collect(self) -> list[Metric]:
            return list(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())  # type: ignore[arg-type]
    return bytes(generate_latest(registry))


def _proxy_timeout_s(request: Any) -> float:
    """The usual 30 s, or longer than the wait a pause or resume asked for."""
    try:
        waits_ms = int(request.query.get("timeout_ms", 0))
    except ValueError:
        waits_ms = 0
    return 30.0 + max(0, waits_ms) / 1000
