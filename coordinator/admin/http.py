"""The admin HTTP listener (aiohttp, on the server's event loop): health, Prometheus metrics and the /v1 JSON API.

    GET    /healthz                           the process is alive
    GET    /readyz                            every shard is loaded (503 while loading); in front of a cluster,
                                              and an upstream broker answers (`upstream`: each one's health)
    GET    /metrics                           Prometheus text format (coordinator.observability.collector)
    GET    /v1/groups                         every group: state, protocol, members, lag
    GET    /v1/groups/{group}                 members (client id, host, instance id, timeouts, decoded
                                              assignment), generation, offsets and lag, paused topics, last
                                              rebalance
    GET    /v1/groups/{group}/timeline        the last rebalances (?limit=N)
    GET    /v1/groups/{group}/lag-history     lag per partition at each recent sample ([wall ms, lag] points),
                                              for a group asked about in the last 10 minutes
    GET    /v1/coordinator                    each worker's shards, connections, requests per API, log
                                              (coordinator.admin.status)
    GET    /ui, /ui/groups/{group},           the web console (coordinator.admin.console): pages over this API
           /ui/coordinator
    POST   /v1/groups/{group}/reset-offsets   reset the committed offsets of an Empty group (body below)
    POST   /v1/groups/{group}/pause           pause the group, or with {"topics": [...]} those topics
    POST   /v1/groups/{group}/resume          resume the group, or with {"topics": [...]} those topics
    PUT    /v1/groups/{group}/settings        per-group settings, e.g. {"group.expansion.timeout.ms": 5000}
                                              (null: back to the server's value)
    DELETE /v1/groups/{group}                 delete an Empty group and its offsets

Pause and resume answer once they are in effect: every member has synced the generation that withholds (or
returns) the partitions, so nothing paused is being consumed when the call returns (200, `in_effect` true,
`waited_ms`). After `?timeout_ms=` (default 30000) they answer 202 with `in_effect` false, the group's state and
`pending_members`; `?wait=false` answers as soon as the change is durable.

reset-offsets takes a JSON object: `to` is "earliest", "latest", "timestamp" (with `timestamp_ms`: the first
offset whose record timestamp is at least that, or the log end when there is none, as Kafka's --to-datetime),
"offset" (with `offset`, for every selected partition) or "explicit" (with `offsets`: [{topic, partition,
offset}]); `topics` selects partitions (["t", "t:0,2"]; default: the topics the group has commits for); with
`dry_run` true nothing is written. Offsets outside [earliest, latest] are clamped into it, as Kafka's tool does.
A group id with "/" in it is sent percent-encoded.

Admin writes go through the same door as Kafka requests (coordinator.server.group_service.call): an OffsetCommit
(generation -1, no member) or a DeleteGroups request entity, a pause or a settings change, run in the group's
shard after the group's in-flight writes settle, answered only once its records are fsynced, with the state
machine's own checks (a member that joins meanwhile makes the commit fail with
UNKNOWN_MEMBER_ID rather than be overwritten). Earliest, latest and by-timestamp offsets come from the data
plane's own ListOffsets handler, so they are what a client would be told.

Starting the listener also starts observing: the rebalance history listens to the state machine, the collector is
registered in the server's registry, and a task samples log-end offsets for the lag-in-seconds estimate. With
several workers, worker 0's listener also fronts the others (coordinator.admin.peers).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from aiohttp import web
from kio.index import load_request_schema
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.brokers import bind_listener
from coordinator.config import Config
from coordinator.group.state import ClassicGroupState
from coordinator.observability.collector import CoordinatorCollector
from coordinator.observability.history import GroupHistory
from coordinator.observability.lag import LagHistory, MetricsFilter, OffsetHistory
from coordinator.observability.view import CoordinatorView
from coordinator.security.admin_auth import admin_auth_middleware, admin_ssl_context
from coordinator.server.group_service import GroupCoordinatorService, ShardUnavailable
from coordinator.server.listener import Server
from coordinator.server.runtime import ShardAborted
from coordinator.server.shards import Shard
from coordinator.tasks import cancel_and_wait
from protocol.api import RequestContext
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

from . import console, reset
from .errors import ApiError
from .peers import AdminPeers
from .status import worker_status

log = logging.getLogger(__name__)

OFFSET_COMMIT_VERSION, DELETE_GROUPS_VERSION = 9, 2
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
TIMELINE_LIMIT_MAX = 1000
DEFAULT_WAIT_MS = 30_000  # pause and resume answer once in effect, or after this (?timeout_ms=)
WAIT_POLL_S = 0.02


class Observability:
    """The observers of one server's group coordinator (see the module doc)."""

    def __init__(
        self, config: Config, server: Server, groups: GroupCoordinatorService | None, dataplane: Any
    ) -> None:
        self.config = config
        self.server = server
        self.groups = groups
        self.history = GroupHistory(config["admin.rebalance.timeline.size"])
        self.dataplane = dataplane
        self.view: CoordinatorView | None = None
        self._task: asyncio.Task[None] | None = None
        if groups is not None:
            groups.shards.add_listener(self.history)
            samples = config["metrics.lag.history.samples"]
            self.view = CoordinatorView(
                groups.shards.view,
                dataplane,
                self.history,
                OffsetHistory(samples),
                lag_history=LagHistory(samples),
            )
            server.metrics.add_collector(
                CoordinatorCollector(
                    self.view,
                    MetricsFilter.from_config(config),
                    cluster_name=str(config["cluster.id"]),
                    log=self._log,
                    load_time_ms=self._load_time_ms,
                )
            )

    def _log(self) -> Any:
        if not self.loaded:
            return None
        assert self.groups is not None
        logs = self.groups.shards.logs()
        return _Logs(logs) if logs else None

    def _load_time_ms(self) -> float | None:
        if not self.loaded:
            return None
        assert self.groups is not None
        seconds = self.groups.shards.load_stats.get("seconds")
        return None if seconds is None else seconds * 1000

    @property
    def loaded(self) -> bool:
        return self.groups is not None and self.groups.shards.loaded

    def start(self) -> None:
        if self.view is not None:
            self._task = asyncio.create_task(self._sample_periodically())

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task], "closing the admin listener's sampler")
        self.server.metrics.remove_collectors()

    async def _sample_periodically(self) -> None:
        assert self.view is not None
        interval_s = self.config["metrics.lag.sample.interval.ms"] / 1000
        while not self.loaded:
            await asyncio.sleep(0.05)
        while True:
            try:
                self.view.sample()
            except Exception:
                log.exception("sampling log-end offsets failed")
            await asyncio.sleep(interval_s)


class AdminListener:
    """The admin HTTP listener of one server (coordinator.app starts it once the Kafka listener is up)."""

    def __init__(
        self,
        config: Config,
        server: Server,
        host: str,
        port: int,
        *,
        groups: GroupCoordinatorService | None,
        dataplane: Any,
        security: Any = None,
        peers: AdminPeers | None = None,
        sock: socket.socket | None = None,
        worker: int = 0,
    ) -> None:
        """`sock`: an already bound socket to serve on instead of host:port (a worker's, bound by its
        supervisor); `peers`: worker 0's front for the other workers; `worker`: this worker's index."""
        self.host, self.port = host, port
        self.bound: tuple[str, int] | None = None
        self._sock = sock
        self._security = security
        self._peers = peers
        self.observability = Observability(config, server, groups, dataplane)
        self.api = AdminApi(server, groups, self.observability, worker)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        api = self.api
        guard = [admin_auth_middleware(self._security)] if self._security is not None else []
        peers = [self._peers.middleware] if self._peers is not None else []
        app = web.Application(middlewares=[_errors, *guard, *peers])
        app.router.add_get("/healthz", api.healthz)
        app.router.add_get("/readyz", api.readyz)
        app.router.add_get("/metrics", api.metrics)
        app.router.add_get("/v1/groups", api.list_groups)
        app.router.add_get("/v1/groups/{group}", api.describe_group)
        app.router.add_delete("/v1/groups/{group}", api.delete_group)
        app.router.add_get("/v1/groups/{group}/timeline", api.timeline)
        app.router.add_get("/v1/groups/{group}/lag-history", api.lag_history)
        app.router.add_get("/v1/coordinator", api.coordinator)
        app.router.add_post("/v1/groups/{group}/reset-offsets", api.reset_offsets)
        app.router.add_post("/v1/groups/{group}/pause", api.pause)
        app.router.add_post("/v1/groups/{group}/resume", api.resume)
        app.router.add_put("/v1/groups/{group}/settings", api.put_settings)
        console.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = self._sock
        if sock is None:
            sock = await asyncio.to_thread(bind_listener, self.host, self.port)
        site = web.SockSite(
            self._runner, sock, ssl_context=admin_ssl_context(self._security) if self._security else None
        )
        await site.start()
        self.bound = (self.host, sock.getsockname()[1])
        self.observability.start()

    async def close(self) -> None:
        await self.observability.close()
        if self._peers is not None:
            await self._peers.close()
        if self._runner is not None:
            await self._runner.cleanup()


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response({"error": exc.error, "message": exc.message}, status=exc.status)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _group_id(request: web.Request) -> str:
    return urllib.parse.unquote(request.match_info["group"])


class AdminApi:
    def __init__(
        self, server: Server, groups: GroupCoordinatorService | None, obs: Observability, worker: int = 0
    ) -> None:
        self.server = server
        self.groups = groups
        self.obs = obs
        self.worker = worker

    # -- health and metrics ----------------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        shards = self.groups.shards.status() if self.groups is not None else {}
        # In front of a cluster (coordinator.front): the upstream brokers' health, and ready only while one answers.
        status = getattr(self.obs.dataplane, "upstream_status", None)
        extra = {"upstream": status()} if status is not None else {}
        if self.server.ready:
            return web.json_response({"status": "ready", **extra})
        return web.json_response({"status": "not ready", "shards": shards, **extra}, status=503)

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.server.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def coordinator(self, request: web.Request) -> web.Response:
        status = worker_status(self.server, self.groups, self.obs.dataplane, self.worker)
        return web.json_response({"workers": [status]})

    # -- reading ---------------------------------------------------------------------------------------------

    def _view(self) -> CoordinatorView:
        if self.obs.view is None:
            raise ApiError(404, "NO_GROUP_COORDINATOR", "this server has no group coordinator")
        if not self.obs.loaded:
            raise ApiError(503, "COORDINATOR_LOAD_IN_PROGRESS", "the group log is still loading")
        return self.obs.view

    async def _fresh_view(self) -> CoordinatorView:
        """The view, once the data plane's topics and log-end offsets include every change acknowledged so far
        (another worker's data plane is followed through a cache)."""
        view = self._view()
        if view.dataplane is not None:
            await view.dataplane.catch_up()
        return view

    def _service(self) -> GroupCoordinatorService:
        self._view()
        assert self.groups is not None
        return self.groups

    async def list_groups(self, request: web.Request) -> web.Response:
        view = await self._fresh_view()
        groups = view.list_json()
        state = request.query.get("state")
        if state:
            wanted = {s.strip().lower() for s in state.split(",")}
            groups = [g for g in groups if g["state"].lower() in wanted]
        return web.json_response({"groups": groups})

    async def describe_group(self, request: web.Request) -> web.Response:
        view = await self._fresh_view()
        group_id = _group_id(request)
        group = view.group(group_id)
        if group is None:
            raise ApiError(404, "GROUP_ID_NOT_FOUND", f"group {group_id} does not exist")
        data = view.describe_json(group, _wall_ms())
        shard = self._service().shards.for_group(group_id)
        if shard is not None:
            data.update(_group_admin_state(shard, group_id))
            paused = shard.machine.pause_state(group_id)
            if paused.is_paused and group.uses_consumer_protocol():
                for member in data["members"]:  # what members hold, as DescribeGroups shows it
                    if member.get("assignment") is not None:
                        member["assignment"] = [
                            a for a in member["assignment"] if not paused.withholds(a["topic"])
                        ]
        return web.json_response(data)

    async def timeline(self, request: web.Request) -> web.Response:
        view = self._view()
        group_id = _group_id(request)
        try:
            limit = int(request.query.get("limit", "0")) or None
        except ValueError:
            raise ApiError(400, "INVALID_REQUEST", "limit must be an integer") from None
        if limit is not None and not 0 < limit <= TIMELINE_LIMIT_MAX:
            raise ApiError(400, "INVALID_REQUEST", f"limit must be between 1 and {TIMELINE_LIMIT_MAX}")
        group = view.group(group_id)
        if group is None:
            raise ApiError(404, "GROUP_ID_NOT_FOUND", f"group {group_id} does not exist")
        return web.json_response(
            {
                "group_id": group_id,
                "state": str(group.state),
                "generation": group.generation_id,
                "rebalances": view.timeline_json(group_id, limit, _wall_ms()),
            }
        )

    async def lag_history(self, request: web.Request) -> web.Response:
        view = self._view()
        group_id = _group_id(request)
        if view.group(group_id) is None:
            raise ApiError(404, "GROUP_ID_NOT_FOUND", f"group {group_id} does not exist")
        return web.json_response(
            {
                "group_id": group_id,
                "sample_interval_ms": self.obs.config["metrics.lag.sample.interval.ms"],
                "partitions": view.lag_history_json(group_id),
            }
        )

    # -- writing: through the group service's door, as Kafka requests ----------------------------------------

    async def _call(self, group_id: str, operation: Callable[[Shard], Callable[..., Any]], *args: Any) -> Any:
        service = self._service()
        try:
            return await service.call(group_id, operation, *args)
        except ShardUnavailable as exc:
            if exc.shard is None:
                raise ApiError(
                    421, "NOT_COORDINATOR", f"group {group_id} belongs to another worker"
                ) from None
            raise ApiError(
                503,
                exc.code.name.upper(),
                f"the shard of group {group_id} is "
                f"{exc.shard.state.value if not service.shards.unloaded else 'unloaded'}; retry "
                "shortly",
            ) from None
        except ShardAborted:
            raise ApiError(
                503, "COORDINATOR_NOT_AVAILABLE", f"the shard of group {group_id} failed; retry shortly"
            ) from None

    async def pause(self, request: web.Request) -> web.Response:
        return await self._pause_or_resume(request, "pause")

    async def resume(self, request: web.Request) -> web.Response:
        return await self._pause_or_resume(request, "resume")

    async def _pause_or_resume(self, request: web.Request, what: str) -> web.Response:
        self._view()
        group_id = _group_id(request)
        body = await _json_object(request, allow_empty=True)
        topics = body.get("topics")
        if topics is not None and (
            not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics)
        ):
            raise ApiError(400, "INVALID_REQUEST", '`topics` must be a list of topic names, like ["orders"]')
        operation: Callable[[Shard], Callable[..., Any]] = (
            (lambda s: s.machine.pause_group) if what == "pause" else (lambda s: s.machine.resume_group)
        )
        wait = request.query.get("wait", "true").lower() not in ("false", "0", "no")
        timeout_ms = _query_int(request, "timeout_ms", DEFAULT_WAIT_MS)
        answer = await self._call(group_id, operation, group_id, topics or None)
        _raise_admin_error(answer)
        log.info("admin: %s of group %s: %s", what, group_id, answer.message)
        if not wait:
            return await self._admin_state(group_id, answer.message)
        progress, waited_ms = await self._until_in_effect(group_id, timeout_ms)
        shard = self._service().shards.for_group(group_id)
        return web.json_response(
            {
                "group_id": group_id,
                "message": answer.message,
                **(
                    _group_admin_state(shard, group_id)
                    if shard is not None
                    else {"paused": answer.data["paused"]}
                ),
                **progress,
                "waited_ms": waited_ms,
            },
            status=200 if progress["in_effect"] else 202,
        )

    async def _until_in_effect(self, group_id: str, timeout_ms: int) -> tuple[dict[str, Any], int]:
        """Wait until every member of the group has synced the assignment the new pause state gives it (the
        rebalance the change started has completed and each member has its answer), or `timeout_ms`."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_ms / 1000
        while True:
            shard = self._service().shards.for_group(group_id)
            progress = (
                shard.machine.pause_progress(group_id)
                if shard is not None and shard.serving
                # A shard being reloaded knows no group yet: not a sign the pause is in effect.
                else {
                    "in_effect": False,
                    "state": "Unavailable",
                    "generation": -1,
                    "members_synced": 0,
                    "pending_members": [],
                }
            )
            now = loop.time()
            if progress["in_effect"] or now >= deadline:
                return progress, round((now - started) * 1000)
            await asyncio.sleep(min(WAIT_POLL_S, deadline - now))

    async def put_settings(self, request: web.Request) -> web.Response:
        self._view()
        group_id = _group_id(request)
        body = await _json_object(request, allow_empty=False)
        answer = await self._call(group_id, lambda s: s.machine.set_group_settings, group_id, body)
        _raise_admin_error(answer)
        log.info("admin: settings of group %s: %s", group_id, body)
        return await self._admin_state(group_id, answer.message)

    async def _admin_state(self, group_id: str, message: str) -> web.Response:
        shard = self._service().shards.for_group(group_id)
        assert shard is not None
        return web.json_response(
            {"group_id": group_id, "message": message, **_group_admin_state(shard, group_id)}
        )

    async def delete_group(self, request: web.Request) -> web.Response:
        self._view()
        group_id = _group_id(request)
        request_class = load_request_schema(ApiKey.DELETE_GROUPS, DELETE_GROUPS_VERSION)
        entity = build(request_class, {"groups_names": [group_id]})
        response = await self._call(
            group_id, lambda s: s.machine.delete_groups, DELETE_GROUPS_VERSION, entity
        )
        code = ErrorCode(_get(response.results[0], "error_code"))
        if code == ErrorCode.none:
            log.info("admin: deleted group %s", group_id)
            return web.json_response({"group_id": group_id, "deleted": True})
        status = {ErrorCode.group_id_not_found: 404, ErrorCode.non_empty_group: 409}.get(code, 503)
        message = {
            ErrorCode.group_id_not_found: f"group {group_id} does not exist",
            ErrorCode.non_empty_group: f"group {group_id} has members; only an Empty group can be deleted",
        }.get(code, f"deleting group {group_id} failed")
        raise ApiError(status, code.name.upper(), message)

    async def reset_offsets(self, request: web.Request) -> web.Response:
        view = await self._fresh_view()
        group_id = _group_id(request)
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "INVALID_REQUEST", "the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise ApiError(400, "INVALID_REQUEST", "the body must be a JSON object")
        to = reset.reset_target(body)
        dry_run = bool(body.get("dry_run", False))

        group = view.group(group_id)
        if group is not None and not group.is_in_state(ClassicGroupState.EMPTY):
            raise ApiError(
                409,
                "NON_EMPTY_GROUP",
                f"group {group_id} is {group.state}; offsets can be reset only while it is Empty",
            )
        committed = view.shards.offsets.store.group_offsets(group_id)
        explicit = reset.explicit_offsets(body) if to == "explicit" else {}
        partitions = (
            sorted(explicit)
            if to == "explicit"
            else reset.select_partitions(body.get("topics"), committed, view.partition_count)
        )
        reset.check_partitions(partitions, view.partition_count)

        earliest = await self._list_offsets(partitions, EARLIEST_TIMESTAMP)
        latest = await self._list_offsets(partitions, LATEST_TIMESTAMP)
        if to == "earliest":
            targets = dict(earliest)
        elif to == "latest":
            targets = dict(latest)
        elif to == "timestamp":
            found = await self._list_offsets(partitions, reset.required_int(body, "timestamp_ms", to))
            targets = {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
        elif to == "offset":
            offset = reset.required_int(body, "offset", to)
            targets = {tp: offset for tp in partitions}
        else:
            targets = explicit
        result = reset.plan(partitions, targets, earliest, latest, committed)
        if not dry_run:
            await self._commit(group_id, result)
            log.info(
                "admin: reset offsets of group %s to %s: %s",
                group_id,
                to,
                ", ".join(f"{r['topic']}-{r['partition']}={r['offset']}" for r in result),
            )
        return web.json_response({"group_id": group_id, "dry_run": dry_run, "to": to, "offsets": result})

    async def _list_offsets(
        self, partitions: list[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int]:
        """Ask the data plane's ListOffsets handler, as a client would."""
        spec = self.server.table.spec(ApiKey.LIST_OFFSETS)
        if spec is None:
            raise ApiError(503, "NO_DATA_PLANE", "this server has no ListOffsets handler")
        version = max(spec.min_version, min(spec.max_version, 7))
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
            )
        entity = build(
            load_request_schema(ApiKey.LIST_OFFSETS, version),
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        ctx = RequestContext(ApiKey.LIST_OFFSETS, version, 0, "kgc-admin", "admin")
        response = await spec.handler(ctx, entity)
        out: dict[tuple[str, int], int] = {}
        for topic in _get(response, "topics") or ():
            for p in _get(topic, "partitions") or ():
                code = _get(p, "error_code")
                if code:
                    where = f"{_get(topic, 'name')}-{_get(p, 'partition_index')}"
                    raise ApiError(503, ErrorCode(code).name.upper(), f"ListOffsets failed for {where}")
                out[(_get(topic, "name"), _get(p, "partition_index"))] = int(_get(p, "offset"))
        return out

    async def _commit(self, group_id: str, offsets: list[dict[str, Any]]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for entry in offsets:
            topics.setdefault(entry["topic"], []).append(
                {
                    "partition_index": entry["partition"],
                    "committed_offset": entry["offset"],
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        entity = build(
            load_request_schema(ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION),
            {
                "group_id": group_id,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        response = await self._call(
            group_id, lambda s: s.machine.offset_commit, OFFSET_COMMIT_VERSION, entity
        )
        errors = sorted(
            {
                ErrorCode(_get(p, "error_code"))
                for t in _get(response, "topics")
                for p in _get(t, "partitions")
            }
            - {ErrorCode.none}
        )
        if errors:
            names = ", ".join(e.name.upper() for e in errors)
            status = (
                409
                if errors[0]
                in (
                    ErrorCode.unknown_member_id,
                    ErrorCode.illegal_generation,
                    ErrorCode.rebalance_in_progress,
                )
                else 503
            )
            raise ApiError(
                status,
                errors[0].name.upper(),
                f"committing the new offsets of group {group_id} failed: {names} (nothing or only "
                "part of it may have been written; the group may have gained members)",
            )


class _Logs:
    """Several shard logs seen as one by the storage metrics (stats summed)."""

    def __init__(self, logs: list[Any]) -> None:
        self._logs = logs

    def stats(self) -> Any:
        stats = [the_log.stats() for the_log in self._logs]
        first = stats[0]
        summed = {
            f.name: sum(getattr(s, f.name) for s in stats)
            for f in dataclasses.fields(first)
            if isinstance(getattr(first, f.name), int)
        }
        return dataclasses.replace(first, **summed)


async def _json_object(request: web.Request, allow_empty: bool) -> dict[str, Any]:
    if allow_empty and not await request.read():
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST", "the body must be a JSON object") from None
    if body is None and allow_empty:
        return {}
    if not isinstance(body, dict):
        raise ApiError(400, "INVALID_REQUEST", "the body must be a JSON object")
    return body


def _query_int(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ApiError(400, "INVALID_REQUEST", f"`{name}` must be a whole number >= 0, not {text!r}")
    return value


def _group_admin_state(shard: Shard, group_id: str) -> dict[str, Any]:
    """What pause and the membership windows hold for a group (coordinator.shard)."""
    machine = shard.machine
    group = machine.groups.get(group_id)
    consumer = machine.consumer_groups.get(group_id)
    if group is not None:
        offline = [m.group_instance_id for m in group.offline_members()]
    elif (
        consumer is not None
    ):  # (a consumer group's joiners are not held back: the next target waits instead)
        offline = [consumer.members[m].instance_id for m in consumer.offline if m in consumer.members]
    else:
        offline = []
    return {
        "paused": machine.pause_state(group_id).to_json(),
        "settings": dict(sorted(machine.group_settings.own(group_id).items())),
        "effective_settings": machine.effective_settings(group_id),
        "offline_members": offline,
        "held_back_joiners": list(group.expansion_joiners) if group is not None else [],
    }


def _raise_admin_error(answer: Any) -> None:
    code = ErrorCode(answer.error)
    if code == ErrorCode.none:
        return
    status = {
        ErrorCode.inconsistent_group_protocol: 409,
        ErrorCode.invalid_request: 409,
        ErrorCode.invalid_config: 400,
        ErrorCode.invalid_group_id: 400,
    }.get(code, 503)
    raise ApiError(status, code.name.upper(), answer.message)


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
