"""The admin HTTP listener (aiohttp, on the server's event loop): health, Prometheus metrics and the /v1 JSON API.

    GET    /healthz                           the process is alive
    GET    /readyz                            every shard is loaded (503 while loading)
    GET    /metrics                           Prometheus text format (coordinator.observability.collector)
    GET    /v1/groups                         every group: state, protocol, members, lag
    GET    /v1/groups/{group}                 members (client id, host, instance id, timeouts, decoded
                                              assignment), generation, offsets and lag, paused topics, last
                                              rebalance
    GET    /v1/groups/{group}/timeline        the last rebalances (?limit=N)
    POST   /v1/groups/{group}/reset-offsets   reset the committed offsets of an Empty group (body below)
    POST   /v1/groups/{group}/pause           pause the group, or with {"topics": [...]} those topics
    POST   /v1/groups/{group}/resume          resume the group, or with {"topics": [...]} those topics
    PUT    /v1/groups/{group}/settings        per-group settings, e.g. {"group.expansion.timeout.ms": 5000}
                                              (null: back to the server's value)
    DELETE /v1/groups/{group}                 delete an Empty group and its offsets

reset-offsets takes a JSON object: `to` is "earliest", "latest", "timestamp" (with `timestamp_ms`: the first
offset whose record timestamp is at least that, or the log end when there is none, as Kafka's --to-datetime),
"offset" (with `offset`, for every selected partition) or "explicit" (with `offsets`: [{topic, partition,
offset}]); `topics` selects partitions (["t", "t:0,2"]; default: the topics the group has commits for); with
`dry_run` true nothing is written. Offsets outside [earliest, latest] are clamped into it, as Kafka's tool does.
A group id with "/" in it is sent percent-encoded.

Admin writes go through the same durable path as Kafka requests: an OffsetCommit (generation -1, no member) or a
DeleteGroups request entity is run through the shard runtime, so the answer is sent only once the records are
fsynced, and the state machine's own checks apply (a member that joins meanwhile makes the commit fail with
UNKNOWN_MEMBER_ID rather than be overwritten). Earliest, latest and by-timestamp offsets come from the data
plane's own ListOffsets handler, so they are what a client would be told.

Starting the listener also starts observing: the rebalance history listens to the state machine, the collector is
registered in the server's registry, a task samples log-end offsets for the lag-in-seconds estimate, and, once
loaded, the group log is wrapped in a timing decorator (coordinator.observability.storage).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import web
from kio.index import load_request_schema
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.brokers import bind_listener
from coordinator.group.state import ClassicGroupState
from coordinator.observability.collector import CoordinatorCollector
from coordinator.observability.history import GroupHistory
from coordinator.observability.lag import MetricsFilter, OffsetHistory
from coordinator.observability.storage import TimedLog
from coordinator.observability.view import CoordinatorView
from coordinator.security.admin_auth import admin_auth_middleware, admin_ssl_context
from protocol.api import RequestContext
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from .listener import Server

log = logging.getLogger(__name__)

OFFSET_COMMIT_VERSION, DELETE_GROUPS_VERSION = 9, 2
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
TIMELINE_LIMIT_MAX = 1000


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message


class Observability:
    """The observers of one server's group coordinator (see the module doc)."""

    def __init__(self, server: Server) -> None:
        config = server.config
        self.server = server
        self.groups = server.groups
        self.history = GroupHistory(config["admin.rebalance.timeline.size"])
        self.view: CoordinatorView | None = None
        self._task: asyncio.Task[None] | None = None
        if self.groups is not None:
            self.groups.add_listener(self.history)
            self.view = CoordinatorView(self.groups.view, server.dataplane, self.history,
                                        OffsetHistory(config["metrics.lag.history.samples"]))
            server.metrics.add_collector(CoordinatorCollector(
                self.view, MetricsFilter.from_config(config), cluster_name=str(config["cluster.id"]),
                log=self._log, load_time_ms=self._load_time_ms,
            ))

    def _log(self) -> Any:
        if self.groups is None or not self.groups.loaded:
            return None
        logs = [s.runtime.log for s in self.groups.shards.values() if s.runtime.log is not None]
        return _Logs(logs) if logs else None

    def _load_time_ms(self) -> float | None:
        if self.groups is None or not self.groups.loaded:
            return None
        seconds = self.groups.load_stats.get("seconds")
        return None if seconds is None else seconds * 1000

    @property
    def loaded(self) -> bool:
        return self.groups is not None and self.groups.loaded

    def start(self) -> None:
        if self.view is not None:
            self._task = asyncio.create_task(self._sample_periodically())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.server.metrics.remove_collectors()

    async def _sample_periodically(self) -> None:
        assert self.view is not None and self.groups is not None
        interval_s = self.server.config["metrics.lag.sample.interval.ms"] / 1000
        while not self.groups.loaded:
            await asyncio.sleep(0.05)
        metrics = self.server.metrics
        self.groups.wrap_logs(lambda the_log: the_log if isinstance(the_log, TimedLog) else TimedLog(
            the_log, metrics.log_append_duration.observe, metrics.log_compaction_duration.observe))
        while True:
            try:
                self.view.sample()
            except Exception:
                log.exception("sampling log-end offsets failed")
            await asyncio.sleep(interval_s)


class Handle:
    """What Server keeps of the admin listener: `cleanup()` stops it."""

    def __init__(self, runner: web.AppRunner, observability: Observability) -> None:
        self.runner = runner
        self.observability = observability

    async def cleanup(self) -> None:
        await self.observability.close()
        await self.runner.cleanup()


async def start(server: Server, host: str, port: int,
                sock: Any = None) -> tuple[Handle, tuple[str, int]]:
    """`sock`: an already bound socket to serve on instead of host:port (a worker's, bound by its supervisor)."""
    obs = Observability(server)
    api = AdminApi(server, obs)
    # With several workers, worker 0's listener fronts the others (coordinator.server.workers.AdminPeers).
    peers = [server.admin_middleware] if server.admin_middleware is not None else []
    security = getattr(server, "security", None)  # coordinator.security: token / certificate for writes
    guard = [admin_auth_middleware(security)] if security is not None else []
    app = web.Application(middlewares=[_errors, *guard, *peers])
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/readyz", api.readyz)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/v1/groups", api.list_groups)
    app.router.add_get("/v1/groups/{group}", api.describe_group)
    app.router.add_delete("/v1/groups/{group}", api.delete_group)
    app.router.add_get("/v1/groups/{group}/timeline", api.timeline)
    app.router.add_post("/v1/groups/{group}/reset-offsets", api.reset_offsets)
    app.router.add_post("/v1/groups/{group}/pause", api.pause)
    app.router.add_post("/v1/groups/{group}/resume", api.resume)
    app.router.add_put("/v1/groups/{group}/settings", api.put_settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    if sock is None:
        sock = await asyncio.to_thread(bind_listener, host, port)
    site = web.SockSite(runner, sock, ssl_context=admin_ssl_context(security) if security else None)
    await site.start()
    bound_port = sock.getsockname()[1]
    obs.start()
    return Handle(runner, obs), (host, bound_port)


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
    def __init__(self, server: Server, obs: Observability) -> None:
        self.server = server
        self.obs = obs

    # -- health and metrics ----------------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        shards = self.server.groups.status() if self.server.groups is not None else {}
        if self.server.ready:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not ready", "shards": shards}, status=503)

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.server.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

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
        shard = self.server.groups.shard_for(group_id)
        if shard is not None:
            data.update(_group_admin_state(shard.machine, group_id))
            paused = shard.machine.pause_state(group_id)
            if paused.is_paused and group.uses_consumer_protocol():
                for member in data["members"]:  # what members hold, as DescribeGroups shows it
                    if member.get("assignment") is not None:
                        member["assignment"] = [a for a in member["assignment"]
                                                if not paused.withholds(a["topic"])]
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
        return web.json_response({
            "group_id": group_id,
            "state": str(group.state),
            "generation": group.generation_id,
            "rebalances": view.timeline_json(group_id, limit, _wall_ms()),
        })

    # -- writing ---------------------------------------------------------------------------------------------

    async def pause(self, request: web.Request) -> web.Response:
        return await self._pause_or_resume(request, "pause_group")

    async def resume(self, request: web.Request) -> web.Response:
        return await self._pause_or_resume(request, "resume_group")

    async def _pause_or_resume(self, request: web.Request, method: str) -> web.Response:
        self._view()
        group_id = _group_id(request)
        body = await _json_object(request, allow_empty=True)
        topics = body.get("topics")
        if topics is not None and (not isinstance(topics, list)
                                   or not all(isinstance(t, str) and t for t in topics)):
            raise ApiError(400, "INVALID_REQUEST", '`topics` must be a list of topic names, like ["orders"]')
        shard = _owner(self.server.groups, group_id)
        answer = await shard.runtime.call(getattr(shard.machine, method), group_id, topics or None)
        _raise_admin_error(answer)
        log.info("admin: %s of group %s: %s", method.removesuffix("_group"), group_id, answer.message)
        return web.json_response({"group_id": group_id, "message": answer.message,
                                  **_group_admin_state(shard.machine, group_id)})

    async def put_settings(self, request: web.Request) -> web.Response:
        self._view()
        group_id = _group_id(request)
        body = await _json_object(request, allow_empty=False)
        shard = _owner(self.server.groups, group_id)
        answer = await shard.runtime.call(shard.machine.set_group_settings, group_id, body)
        _raise_admin_error(answer)
        log.info("admin: settings of group %s: %s", group_id, body)
        return web.json_response({"group_id": group_id, "message": answer.message,
                                  **_group_admin_state(shard.machine, group_id)})

    async def delete_group(self, request: web.Request) -> web.Response:
        self._view()
        group_id = _group_id(request)
        groups = self.server.groups
        request_class = load_request_schema(ApiKey.DELETE_GROUPS, DELETE_GROUPS_VERSION)
        entity = build(request_class, {"groups_names": [group_id]})
        shard = _owner(groups, group_id)
        response = await shard.runtime.call(shard.machine.delete_groups, DELETE_GROUPS_VERSION, entity)
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
        to = body.get("to")
        if to not in ("earliest", "latest", "timestamp", "offset", "explicit"):
            raise ApiError(400, "INVALID_REQUEST",
                           "`to` must be one of earliest, latest, timestamp, offset, explicit")
        dry_run = bool(body.get("dry_run", False))

        group = view.group(group_id)
        if group is not None and not group.is_in_state(ClassicGroupState.EMPTY):
            raise ApiError(409, "NON_EMPTY_GROUP",
                           f"group {group_id} is {group.state}; offsets can be reset only while it is Empty")
        store = view.shards.offsets.store
        committed = store.group_offsets(group_id)

        explicit: dict[tuple[str, int], int] = {}
        if to == "explicit":
            entries = body.get("offsets")
            if not isinstance(entries, list) or not entries:
                raise ApiError(400, "INVALID_REQUEST",
                               "`offsets` must be a list of {topic, partition, offset}")
            for entry in entries:
                try:
                    explicit[(str(entry["topic"]), int(entry["partition"]))] = int(entry["offset"])
                except (KeyError, TypeError, ValueError):
                    raise ApiError(400, "INVALID_REQUEST", f"bad offsets entry {entry!r}") from None
            partitions = sorted(explicit)
        else:
            partitions = self._select(body.get("topics"), committed)
        for topic, partition in partitions:
            count = view.partition_count(topic)
            if count is None or not 0 <= partition < count:
                raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{partition} does not exist")

        earliest = await self._list_offsets(partitions, EARLIEST_TIMESTAMP)
        latest = await self._list_offsets(partitions, LATEST_TIMESTAMP)
        if to == "earliest":
            targets = dict(earliest)
        elif to == "latest":
            targets = dict(latest)
        elif to == "timestamp":
            try:
                timestamp_ms = int(body["timestamp_ms"])
            except (KeyError, TypeError, ValueError):
                raise ApiError(400, "INVALID_REQUEST",
                               "`timestamp_ms` is required with to=timestamp") from None
            found = await self._list_offsets(partitions, timestamp_ms)
            targets = {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
        elif to == "offset":
            try:
                offset = int(body["offset"])
            except (KeyError, TypeError, ValueError):
                raise ApiError(400, "INVALID_REQUEST", "`offset` is required with to=offset") from None
            targets = {tp: offset for tp in partitions}
        else:
            targets = explicit
        result = []
        for tp in partitions:
            target = min(max(targets[tp], earliest[tp]), latest[tp])
            previous = committed.get(tp[0], {}).get(tp[1])
            result.append({"topic": tp[0], "partition": tp[1],
                           "previous": previous.committed_offset if previous is not None else None,
                           "offset": target, "requested": targets[tp],
                           "log_start_offset": earliest[tp], "log_end_offset": latest[tp]})
        if not dry_run:
            await self._commit(group_id, result)
            log.info("admin: reset offsets of group %s to %s: %s", group_id, to,
                     ", ".join(f"{r['topic']}-{r['partition']}={r['offset']}" for r in result))
        return web.json_response({"group_id": group_id, "dry_run": dry_run, "to": to, "offsets": result})

    def _select(self, topics: Any, committed: dict[str, dict[int, Any]]) -> list[tuple[str, int]]:
        view = self.obs.view
        assert view is not None
        if topics is None:
            if not committed:
                raise ApiError(400, "INVALID_REQUEST",
                               "the group has no committed offsets: name the topics to reset")
            return sorted((t, p) for t, parts in committed.items() for p in parts)
        if not isinstance(topics, list) or not topics:
            raise ApiError(400, "INVALID_REQUEST", '`topics` must be a list like ["t", "t:0,2"]')
        selected: set[tuple[str, int]] = set()
        for spec in topics:
            topic, sep, parts = str(spec).partition(":")
            if sep:
                try:
                    selected.update((topic, int(p)) for p in parts.split(",") if p.strip())
                except ValueError:
                    raise ApiError(400, "INVALID_REQUEST", f"bad topic selector {spec!r}") from None
            else:
                count = view.partition_count(topic)
                if count is None:
                    raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic} does not exist")
                selected.update((topic, p) for p in range(count))
        return sorted(selected)

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
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp})
        entity = build(load_request_schema(ApiKey.LIST_OFFSETS, version), {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        })
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
        groups = self.server.groups
        topics: dict[str, list[dict[str, Any]]] = {}
        for entry in offsets:
            topics.setdefault(entry["topic"], []).append({
                "partition_index": entry["partition"], "committed_offset": entry["offset"],
                "committed_leader_epoch": -1, "committed_metadata": "",
            })
        entity = build(load_request_schema(ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION), {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        })
        shard = _owner(groups, group_id)
        response = await shard.runtime.call(shard.machine.offset_commit, OFFSET_COMMIT_VERSION, entity)
        errors = sorted({ErrorCode(_get(p, "error_code")) for t in _get(response, "topics")
                         for p in _get(t, "partitions")} - {ErrorCode.none})
        if errors:
            names = ", ".join(e.name.upper() for e in errors)
            status = 409 if errors[0] in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation,
                                          ErrorCode.rebalance_in_progress) else 503
            raise ApiError(status, errors[0].name.upper(),
                           f"committing the new offsets of group {group_id} failed: {names} (nothing or only "
                           "part of it may have been written; the group may have gained members)")


def _owner(groups: Any, group_id: str) -> Any:
    """The serving shard of `group_id`, or an ApiError saying why there is none."""
    shard = groups.shard_for(group_id)
    if shard is None:
        raise ApiError(421, "NOT_COORDINATOR", f"group {group_id} belongs to another worker")
    if not shard.serving:
        raise ApiError(503, "COORDINATOR_NOT_AVAILABLE",
                       f"the shard of group {group_id} is {shard.state.value}; retry shortly")
    return shard


class _Logs:
    """Several shard logs seen as one by the storage metrics (stats summed)."""

    def __init__(self, logs: list[Any]) -> None:
        self._logs = logs

    def stats(self) -> Any:
        stats = [the_log.stats() for the_log in self._logs]
        first = stats[0]
        summed = {f.name: sum(getattr(s, f.name) for s in stats) for f in dataclasses.fields(first)
                  if isinstance(getattr(first, f.name), int)}
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


def _group_admin_state(machine: Any, group_id: str) -> dict[str, Any]:
    """What pause and the membership windows hold for a group (coordinator.shard)."""
    group = machine.groups.get(group_id)
    return {
        "paused": machine.pause_state(group_id).to_json(),
        "settings": dict(sorted(machine.group_settings.own(group_id).items())),
        "effective_settings": machine.effective_settings(group_id),
        "offline_members": [m.group_instance_id for m in group.offline_members()] if group is not None else [],
        "held_back_joiners": list(group.expansion_joiners) if group is not None else [],
    }


def _raise_admin_error(answer: Any) -> None:
    code = ErrorCode(answer.error)
    if code == ErrorCode.none:
        return
    status = {ErrorCode.inconsistent_group_protocol: 409, ErrorCode.invalid_request: 409,
              ErrorCode.invalid_config: 400, ErrorCode.invalid_group_id: 400}.get(code, 503)
    raise ApiError(status, code.name.upper(), answer.message)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
